#include "checkpoint/save_agreement.h"

#include "util/error.h"
#include "util/log.h"

namespace ft::checkpoint {

void agree(comm::Communicator& comm, const Attempt& attempt, const std::string& what, const std::function<void()>& cleanup) {
  const double failures = comm::all_reduce_scalar(comm, attempt.error().empty() ? 0.0 : 1.0, comm::ReduceOp::kSum);
  if (failures == 0) return;
  if (comm.is_root()) {
    try {
      cleanup();
    } catch (const std::exception& e) {
      log::warn("could not clean up after the failed save: ", e.what());
    }
  }
  FT_CHECK(!attempt.error().empty(), what, ": failed on ", failures, failures == 1 ? " other rank" : " other ranks",
           " (its error is above); the previous checkpoint is untouched");
  FT_CHECK(false, what, ": ", attempt.error(), "; the previous checkpoint is untouched");
}

}  // namespace ft::checkpoint
