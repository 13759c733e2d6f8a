// The Communicator for CPU tensors, on c10d's ProcessGroupGloo over TCP. reduce_scatter runs as
// an all-to-all plus a local sum (this LibTorch's Gloo has no reduce-scatter), so each rank sends
// and receives (W-1)/W of the buffer, the volume of a real reduce-scatter; all_gather fills views
// of the flat output; kAvg is a sum divided in wait().
// Failures: every wait() returns or throws within timeout_s of being called (our own deadline:
// Gloo's are not reliable in LibTorch 1.13). The ft::Error names the operation ("all_reduce #12 of
// 4096 bytes (float32, sum)") and the ranks that exited, stopped, went silent or fell behind, and
// rank 0 when it, the store's host, is the one gone (peer_monitor.h). From then on the
// communicator refuses every call, and its destructor does not join Gloo's threads, which may be
// blocked for good: it leaks the process group instead. The process should end: apps return
// through ft::comm::exit_process (process_exit.h). c10d stays out of this header.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "comm/rank_env.h"
#include "comm/store.h"

namespace ft::comm {

// Connects the Gloo process group of all env.world_size ranks through `store` (every rank calls
// it, in the same order relative to other communicators). Binds to 127.0.0.1 when the whole
// world is on this node; otherwise to GLOO_SOCKET_IFNAME when set, else to the local address that
// routes to MASTER_ADDR (local_address.h: an error when that is a loopback address).
// Tensors: CPU, contiguous; float32/64, float16, bfloat16 (reduced in float32), int8/32/64,
// uint8, bool (data movement and kMax only). kAvg needs a floating dtype.
std::unique_ptr<Communicator> make_gloo_communicator(const RankEnv& env, std::shared_ptr<Store> store,
                                                     double timeout_s);

}  // namespace ft::comm
