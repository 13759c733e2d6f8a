// Rendezvous through the TCP store: check-in with a deadline that reports who arrived, and the
// all-ranks-fail-together config comparison.
#include "comm/rendezvous.h"

#include <chrono>
#include <thread>

#include "config/run_config.h"
#include "comm/peer_monitor.h"
#include "util/error.h"
#include "util/log.h"

namespace ft::comm {
namespace {

using Clock = std::chrono::steady_clock;

const char* const kArrived = "ft/rdzv/arrived";
std::string rank_key(int r) { return process_info_key(r); }
std::string claim_key(int r) { return str("ft/rdzv/claim/", r); }
std::string hash_key(int r) { return str("ft/config/hash/", r); }
std::string verdict_key(int r) { return str("ft/config/verdict/", r); }
const char* const kConfigJson = "ft/config/json";

double seconds_left(Clock::time_point deadline) {
  return std::max(0.0, std::chrono::duration<double>(deadline - Clock::now()).count());
}

std::string rank_list(const std::vector<int>& ranks, std::size_t max_named = 16) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size() && i < max_named; ++i) out += str(i ? ", " : "", ranks[i]);
  if (ranks.size() > max_named) out += str(" and ", ranks.size() - max_named, " more");
  return out;
}

void diff(const Json& here, const Json& there, const std::string& path, std::vector<ConfigDifference>& out) {
  if (here.is_object() && there.is_object()) {
    std::vector<std::string> keys;
    for (auto it = here.begin(); it != here.end(); ++it) keys.push_back(it.key());
    for (auto it = there.begin(); it != there.end(); ++it) {
      if (!here.contains(it.key())) keys.push_back(it.key());
    }
    std::sort(keys.begin(), keys.end());
    for (const std::string& k : keys) {
      const std::string sub = path.empty() ? k : path + "." + k;
      if (!here.contains(k)) {
        out.push_back({sub, "absent", there.at(k).dump()});
      } else if (!there.contains(k)) {
        out.push_back({sub, here.at(k).dump(), "absent"});
      } else {
        diff(here.at(k), there.at(k), sub, out);
      }
    }
    return;
  }
  if (here != there) out.push_back({path.empty() ? "(the whole config)" : path, here.dump(), there.dump()});
}

// Verdicts travel as JSON: [] = same config, else [{"key":..,"here":..,"rank0":..}, ...].
Json encode_differences(const std::vector<ConfigDifference>& diffs) {
  Json out = Json::array();
  for (const auto& d : diffs) out.push_back({{"key", d.key}, {"here", d.here}, {"rank0", d.there}});
  return out;
}

std::string format_differences(const Json& diffs, const std::string& here_name, std::size_t max_keys = 10) {
  std::string out;
  for (std::size_t i = 0; i < diffs.size() && i < max_keys; ++i) {
    const Json& d = diffs[i];
    out += str(i ? "; " : "", d.at("key").get<std::string>(), ": ", d.at("here").get<std::string>(), " ", here_name,
               ", ", d.at("rank0").get<std::string>(), " on rank 0");
  }
  if (diffs.size() > max_keys) out += str("; and ", diffs.size() - max_keys, " more keys");
  return out;
}

}  // namespace

std::vector<ConfigDifference> config_differences(const Json& here, const Json& there) {
  std::vector<ConfigDifference> out;
  diff(here, there, "", out);
  return out;
}

std::shared_ptr<Store> rendezvous(const RankEnv& env, double timeout_s) {
  if (!env.distributed()) return nullptr;
  FT_CHECK(timeout_s > 0, "rendezvous timeout: expected seconds > 0, got ", timeout_s);
  log::set_rank(env.rank, env.world_size);
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  std::shared_ptr<Store> store = Store::connect(env, timeout_s);
  const std::string where = store->address();

  const std::int64_t claims = store->add(claim_key(env.rank), 1);
  store->set(rank_key(env.rank), encode_process(this_process()));
  FT_CHECK(claims == 1, "rank ", env.rank, " checked in at ", where, " twice: two processes were started with RANK=",
           env.rank, ", or another run uses the same MASTER_PORT=", env.master_port,
           " (give each run its own port; ft_launch picks a free one)");
  std::int64_t arrived = store->add(kArrived, 1);
  auto pause = std::chrono::milliseconds(1);
  while (arrived < env.world_size) {
    if (Clock::now() >= deadline) {
      std::vector<int> missing;
      for (int r = 0; r < env.world_size; ++r) {
        if (!store->check(rank_key(r))) missing.push_back(r);
      }
      throw Error(str("rendezvous at ", where, " timed out after ", timeout_s, " s on rank ", env.rank, ": ", arrived,
                      " of ", env.world_size, " ranks arrived (missing: rank", missing.size() > 1 ? "s " : " ",
                      rank_list(missing), "). Check that all ", env.world_size, " ranks were started (WORLD_SIZE=",
                      env.world_size, " on each) with the same MASTER_ADDR=", env.master_addr, " and MASTER_PORT=",
                      env.master_port, ", that MASTER_ADDR is reachable from every machine and no firewall blocks port ",
                      env.master_port, "; a rank that crashed at start-up says why in its own output. (parallel.timeout_s or "
                      "FT_RENDEZVOUS_TIMEOUT sets the wait)"));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
    arrived = store->add(kArrived, 0);
  }
  FT_CHECK(arrived == env.world_size, "rendezvous at ", where, ": ", arrived, " ranks checked in for WORLD_SIZE=",
           env.world_size, ": another run uses the same MASTER_PORT=", env.master_port, ", or the ranks disagree on WORLD_SIZE");
  log::debug("rendezvous at ", where, ": ", env.world_size, " ranks in ",
             std::chrono::duration<double>(Clock::now() - start).count(), " s");
  return store;
}

void check_same_config(const std::shared_ptr<Store>& store, const RankEnv& env, const Json& resolved, double timeout_s) {
  if (!env.distributed()) return;
  FT_CHECK(store != nullptr, "check_same_config: no store for a world of ", env.world_size);
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  const std::string hash = config::config_hash(resolved);
  if (env.rank == 0) store->set(kConfigJson, resolved.dump());
  store->set(hash_key(env.rank), hash);

  FT_CHECK(store->wait_for({hash_key(0), kConfigJson}, seconds_left(deadline)), "rank 0 did not publish its config at ",
           store->address(), " within ", timeout_s, " s: it failed or stopped after the rendezvous (see its output)");
  Json verdict = Json::array();
  if (store->get(hash_key(0)) != hash) {
    const Json rank0 = parse_json(store->get(kConfigJson), "rank 0's resolved config");
    verdict = encode_differences(config_differences(resolved, rank0));
    if (verdict.empty()) verdict = encode_differences({{"(config text)", hash, store->get(hash_key(0))}});
  }
  store->set(verdict_key(env.rank), verdict.dump());

  // Reads every rank's verdict; the ranks whose config differs from rank 0's.
  std::vector<int> differing;
  std::vector<Json> their_diffs;
  auto read_verdicts = [&] {
    std::vector<std::string> keys;
    for (int r = 0; r < env.world_size; ++r) keys.push_back(verdict_key(r));
    if (!store->wait_for(keys, seconds_left(deadline))) {
      std::vector<int> silent;
      for (int r = 0; r < env.world_size; ++r) {
        if (!store->check(verdict_key(r))) silent.push_back(r);
      }
      throw Error(str("the config check at ", store->address(), " timed out after ", timeout_s, " s on rank ",
                      env.rank, ": rank", silent.size() > 1 ? "s " : " ", rank_list(silent),
                      " did not report (failed or stopped after the rendezvous: see their output)"));
    }
    for (int r = 0; r < env.world_size; ++r) {
      Json d = r == env.rank ? verdict : parse_json(store->get(verdict_key(r)), str("rank ", r, "'s config verdict"));
      if (!d.empty()) {
        differing.push_back(r);
        their_diffs.push_back(std::move(d));
      }
    }
  };
  if (!verdict.empty()) {
    // This rank's own difference is the error; the others only add to the message. Rank 0 reports
    // every differing rank and exits once all verdicts are in, taking the store with it, so
    // reading them may fail: the message must not depend on it.
    std::string others;
    try {
      read_verdicts();
      if (differing.size() > 1) others = str(" (ranks whose config differs from rank 0's: ", rank_list(differing), ")");
    } catch (const Error&) {
    }
    throw Error(str("rank ", env.rank, " runs a different config than rank 0 (every rank must run the same one): ",
                    format_differences(verdict, "here"), others,
                    ". Start every rank with the same config file and the same --set overrides"));
  }
  read_verdicts();
  if (differing.empty()) return;
  throw Error(str("rank ", differing.front(), " runs a different config than rank 0: ",
                  format_differences(their_diffs.front(), str("on rank ", differing.front())),
                  differing.size() > 1 ? str(" (differing ranks: ", rank_list(differing), ")") : std::string(),
                  ". Every rank stops; start them all with the same config file and the same --set overrides"));
}

}  // namespace ft::comm
