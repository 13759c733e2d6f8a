// Internal to lib/comm: what the communicators know about the other ranks when a collective fails
// or times out. A background thread, on its own store connection, publishes this rank's heartbeat
// and its count of completed collectives and reads everyone else's; on failure diagnose() names
// the ranks that exited, stopped, went silent or fell behind, and says when rank 0 (the store's
// host) is the one that is gone. All store I/O happens on that thread, so diagnosing never blocks.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "comm/store.h"

namespace ft::comm {

// Who a rank is on its machine: host name, pid, and the pid's start time (so that a reused pid is
// not mistaken for the rank).
struct ProcessInfo {
  std::string host;
  long pid = 0;
  std::uint64_t start_ticks = 0;
};
ProcessInfo this_process();
std::string encode_process(const ProcessInfo& info);              // "host pid ticks"
std::optional<ProcessInfo> decode_process(const std::string& text);

// The store key where rendezvous() publishes each rank's ProcessInfo, which the monitor reads.
std::string process_info_key(int rank);

enum class ProcessState { kElsewhere, kRunning, kStopped, kGone };
// From /proc when the process is on this host (same host name); kElsewhere otherwise, and
// always when FT_PEER_MONITOR_PROC=0.
ProcessState local_process_state(const ProcessInfo& info);

// torch's dtype names: float32, bfloat16, int64, ...
std::string dtype_name(at::ScalarType type);

// One collective as error messages name it: "all_reduce #12 of 4096 bytes (float32, sum)".
struct OpInfo {
  std::string name;      // all_reduce, reduce_scatter, all_gather, broadcast, barrier
  std::int64_t number = 0;  // 1-based count of collectives issued on this communicator
  std::int64_t bytes = 0;
  std::string detail;    // "float32, sum"
  std::string describe() const;
};

class PeerMonitor {
 public:
  // Opens its own connection to `store` and starts the heartbeat thread (period: timeout_s / 10,
  // between 0.1 and 1 s). `name` keeps the keys of different communicators apart; every rank
  // must use the same one.
  PeerMonitor(const Store& store, int rank, int world_size, const std::string& name, double timeout_s);
  ~PeerMonitor();  // stop(false)
  PeerMonitor(const PeerMonitor&) = delete;
  PeerMonitor& operator=(const PeerMonitor&) = delete;

  void completed_one();  // a collective completed on this rank
  std::int64_t completed() const;

  // A sentence naming the ranks that are gone, stopped, silent or behind (with everyone's count
  // of completed collectives). Waits up to the heartbeat staleness threshold for evidence, e.g.
  // for a peer's heartbeat to go stale after its connection closed.
  std::string diagnose();

  // Stops the thread. Joins it unless it does not come back within about a second (a store call
  // blocked on a stopped rank 0): then it is detached, keeping what it uses alive, and stop()
  // returns false.
  bool stop();

  // Normal shutdown: stop(), then check out; rank 0, which hosts the store, waits (at most
  // min(timeout, 30 s)) until every rank has checked out, so that no rank loses the store while
  // finishing its last call; not when wait_for_others is false (this rank is failing: the others
  // must learn it at once, not after the timeout). Never throws.
  void leave(bool wait_for_others = true);

 private:
  struct State;
  std::shared_ptr<State> state_;
  std::thread thread_;
};

}  // namespace ft::comm
