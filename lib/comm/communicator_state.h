// Internal to lib/comm: the bookkeeping every backend's communicator shares (the Gloo and NCCL
// communicators derive their state from it): who this rank is, the collectives issued (their
// #number in messages), the first failure (after which every call is refused with it), and the
// one wording of a failed or timed-out collective, with the peer monitor's verdict on which rank
// is to blame.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "comm/communicator.h"
#include "comm/peer_monitor.h"

namespace ft::comm {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t);
// "0.25", "12.5": seconds as messages print them.
std::string format_seconds(double s);
const char* reduce_op_name(ReduceOp op);

struct CommunicatorState {
  int rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  double timeout_s = 300;
  std::string name;  // keeps the store keys of different communicators apart
  std::shared_ptr<Store> store;
  std::unique_ptr<PeerMonitor> monitor;
  std::atomic<std::int64_t> issued{0};

  std::mutex mutex;
  std::string failure;  // the first failure; afterwards every call is refused with it

  OpInfo next_op(const char* op, const at::Tensor* tensor, const std::string& detail);
  // Throws, naming the first failure, once this communicator has failed.
  void check_usable(const OpInfo& op);
  bool has_failed();
  // "<op> timed out after 1.20 s on rank 0 of 2<where>: <which rank is to blame>[. parallel.timeout_s ...]"
  std::string failure_message(const OpInfo& op, bool timed_out, double seconds, const std::string& where);
  // Records `message` as this communicator's failure (the first one stays), tells the process
  // (process_exit.h) and throws it.
  [[noreturn]] void record_failure(const std::string& message);
};

}  // namespace ft::comm
