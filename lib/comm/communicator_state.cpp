#include "comm/communicator_state.h"

#include <ATen/core/Tensor.h>

#include <iomanip>
#include <sstream>

#include "comm/process_exit.h"
#include "util/error.h"

namespace ft::comm {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string format_seconds(double s) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(s < 10 ? 2 : 1) << s;
  return out.str();
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
  }
  return "?";
}

OpInfo CommunicatorState::next_op(const char* op, const at::Tensor* tensor, const std::string& detail) {
  OpInfo info;
  info.name = op;
  info.number = ++issued;
  if (tensor != nullptr) info.bytes = tensor->numel() * static_cast<std::int64_t>(tensor->element_size());
  info.detail = detail;
  return info;
}

void CommunicatorState::check_usable(const OpInfo& op) {
  std::lock_guard<std::mutex> lock(mutex);
  FT_CHECK(failure.empty(), op.describe(), " refused on rank ", rank, ": this communicator already failed (", failure,
           ")");
}

bool CommunicatorState::has_failed() {
  std::lock_guard<std::mutex> lock(mutex);
  return !failure.empty();
}

std::string CommunicatorState::failure_message(const OpInfo& op, bool timed_out, double seconds,
                                               const std::string& where) {
  std::string diagnosis;
  try {
    diagnosis = monitor ? monitor->diagnose() : "the only rank";
  } catch (const std::exception& e) {
    diagnosis = str("(could not tell which rank: ", e.what(), ")");
  }
  std::string message = str(op.describe(), timed_out ? " timed out after " : " failed after ", format_seconds(seconds),
                            " s on rank ", rank, " of ", world_size, where, ": ", diagnosis);
  if (timed_out) message += str(". parallel.timeout_s = ", timeout_s, " s bounds every collective");
  return message;
}

void CommunicatorState::record_failure(const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (failure.empty()) failure = message;
  }
  note_communication_failure();
  throw Error(message);
}

}  // namespace ft::comm
