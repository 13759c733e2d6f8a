// Rendezvous: every rank connects to the TCP store that rank 0 hosts and checks in, with a
// deadline; then all ranks check that they run the same resolved config. Failures name the
// address, the port, who arrived and what to check, and never hang past the timeout.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/rank_env.h"
#include "comm/store.h"
#include "util/json.h"

namespace ft::comm {

// Connects to MASTER_ADDR:MASTER_PORT (rank 0 hosts the store) and waits until all
// world_size ranks checked in. timeout_s bounds the whole thing (rendezvous_timeout_s() gives
// parallel.timeout_s or FT_RENDEZVOUS_TIMEOUT). Throws ft::Error: "rendezvous at A:P timed out
// after T s on rank R: K of W ranks arrived (missing: ...)", the port in use on rank 0, an
// unreachable MASTER_ADDR, or a rank that checked in twice. A world of one returns nullptr: no
// store, nobody to wait for.
std::shared_ptr<Store> rendezvous(const RankEnv& env, double timeout_s);

// Every rank publishes the FNV hash of its resolved config (config::config_hash) and rank 0 its
// resolved JSON; every rank then publishes ok or the keys where it differs, and all ranks fail
// together when one differs ("train.lr: 0.001 here, 0.002 on rank 0" on that rank, "rank 1
// differs from rank 0: ..." on the others), so no rank waits for one that already gave up.
// store is null in a world of one: nothing to check.
void check_same_config(const std::shared_ptr<Store>& store, const RankEnv& env, const Json& resolved, double timeout_s);

struct ConfigDifference {
  std::string key;    // full path, "train.lr"
  std::string here;   // the value as JSON text, or "absent"
  std::string there;
};
// Leaves (and arrays, as one value) that differ between two resolved configs, in key order.
std::vector<ConfigDifference> config_differences(const Json& here, const Json& there);

}  // namespace ft::comm
