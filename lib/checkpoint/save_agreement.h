// How the ranks of a save agree that every stage worked: each rank attempts its part of a stage
// (keeping its first error and skipping the rest), then all learn together whether any rank
// failed, so nobody waits on a collective that another skipped. The synchronous save and the
// background one (async_checkpointer.h) share it.
#pragma once

#include <exception>
#include <functional>
#include <string>

#include "comm/communicator.h"

namespace ft::checkpoint {

// Runs `fn` unless an earlier stage failed on this rank; keeps the first error.
class Attempt {
 public:
  template <typename Fn>
  void operator()(Fn&& fn) {
    if (!error_.empty()) return;
    try {
      fn();
    } catch (const std::exception& e) {
      error_ = e.what();
      if (error_.empty()) error_ = "unknown error";
    }
  }
  void fail(const std::string& error) {
    if (error_.empty()) error_ = error.empty() ? "unknown error" : error;
  }
  const std::string& error() const { return error_; }

 private:
  std::string error_;
};

// Collective: every rank learns whether any failed; then rank 0 runs `cleanup` and every rank
// throws, naming `what` and this rank's error (or that another rank failed).
void agree(comm::Communicator& comm, const Attempt& attempt, const std::string& what, const std::function<void()>& cleanup);

}  // namespace ft::checkpoint
