// Reading the rank environment: torchrun's variables first, Slurm's when RANK is absent, a world
// of one otherwise. Every check names the variable and the value it found.
#include "comm/rank_env.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <limits>
#include <optional>
#include <vector>

#include "util/error.h"

extern char** environ;

namespace ft::comm {
namespace {

const char* const kLaunchHint = "start the ranks with ft_launch or torchrun, which set every variable";

std::optional<std::string> lookup(const EnvMap& env, const std::string& name) {
  auto it = env.find(name);
  if (it == env.end()) return std::nullopt;
  return it->second;
}

// A non-negative integer, or ft::Error naming the variable and the value.
int parse_count(const std::string& name, const std::string& value) {
  FT_CHECK(!value.empty(), name, " is set but empty: expected a non-negative integer (", kLaunchHint, ")");
  std::size_t start = 0;
  if (value[0] == '-' || value[0] == '+') start = 1;
  bool digits = start < value.size();
  for (std::size_t i = start; i < value.size(); ++i) digits = digits && value[i] >= '0' && value[i] <= '9';
  FT_CHECK(digits, name, "=", value, ": expected a non-negative integer (", kLaunchHint, ")");
  FT_CHECK(value[0] != '-', name, "=", value, ": expected a non-negative integer, got a negative one");
  errno = 0;
  const long long parsed = std::strtoll(value.c_str(), nullptr, 10);
  FT_CHECK(errno != ERANGE && parsed <= std::numeric_limits<int>::max(), name, "=", value, ": too large");
  return static_cast<int>(parsed);
}

std::optional<int> count_var(const EnvMap& env, const std::string& name) {
  auto value = lookup(env, name);
  if (!value) return std::nullopt;
  return parse_count(name, *value);
}

// Slurm's "2(x3),1" (tasks per node, run-length encoded) -> {2, 2, 2, 1}.
std::vector<int> expand_tasks_per_node(const std::string& name, const std::string& value) {
  std::vector<int> out;
  std::size_t pos = 0;
  while (pos <= value.size()) {
    std::size_t comma = value.find(',', pos);
    if (comma == std::string::npos) comma = value.size();
    const std::string item = value.substr(pos, comma - pos);
    const std::size_t paren = item.find("(x");
    const int tasks = parse_count(name, item.substr(0, paren));
    int repeat = 1;
    if (paren != std::string::npos) {
      FT_CHECK(item.back() == ')', name, "=", value, ": expected counts like 4 or 2(x3),1");
      repeat = parse_count(name, item.substr(paren + 2, item.size() - paren - 3));
    }
    for (int i = 0; i < repeat; ++i) out.push_back(tasks);
    pos = comma + 1;
  }
  return out;
}

// Checks shared by both sources; `names` are the variables the values came from.
struct Names {
  const char* rank;
  const char* local_rank;
  const char* world_size;
  const char* local_world_size;
};

void validate(const RankEnv& e, const Names& n) {
  FT_CHECK(e.world_size >= 1, n.world_size, "=", e.world_size, ": expected at least 1");
  FT_CHECK(e.rank < e.world_size, n.rank, "=", e.rank, " is out of range for ", n.world_size, "=", e.world_size,
           ": ranks are 0..", e.world_size - 1, " (every rank must be started with the same ", n.world_size, ")");
  FT_CHECK(e.local_world_size >= 1, n.local_world_size, "=", e.local_world_size, ": expected at least 1");
  FT_CHECK(e.local_world_size <= e.world_size, n.local_world_size, "=", e.local_world_size, " is larger than ",
           n.world_size, "=", e.world_size, ": a node cannot hold more ranks than the whole world");
  FT_CHECK(e.local_rank < e.local_world_size, n.local_rank, "=", e.local_rank, " is out of range for ",
           n.local_world_size, "=", e.local_world_size, ": local ranks are 0..", e.local_world_size - 1);
  FT_CHECK(!e.master_addr.empty(), "MASTER_ADDR is set but empty: expected the host name or address of rank 0");
}

int parse_port(const std::string& value) {
  const int port = parse_count("MASTER_PORT", value);
  FT_CHECK(port >= 1 && port <= 65535, "MASTER_PORT=", value, ": expected a TCP port in 1..65535");
  return port;
}

RankEnv from_torchrun(const EnvMap& env) {
  RankEnv e;
  e.source = "torchrun";
  auto rank = count_var(env, "RANK");
  auto world = count_var(env, "WORLD_SIZE");
  if (rank && !world) {
    throw Error(str("RANK=", *rank, " is set but WORLD_SIZE is not: every rank needs both (", kLaunchHint, ")"));
  }
  if (!rank && world && *world > 1) {
    throw Error(str("WORLD_SIZE=", *world, " is set but RANK is not: each process needs its RANK, 0..", *world - 1,
                    " (", kLaunchHint, ")"));
  }
  if (!rank && !world) e.source = "default";
  e.rank = rank.value_or(0);
  e.world_size = world.value_or(1);
  e.local_world_size = count_var(env, "LOCAL_WORLD_SIZE").value_or(e.world_size);
  FT_CHECK(e.local_world_size >= 1, "LOCAL_WORLD_SIZE=", e.local_world_size, ": expected at least 1");
  e.local_rank = count_var(env, "LOCAL_RANK").value_or(e.rank % e.local_world_size);
  const auto addr = lookup(env, "MASTER_ADDR");
  if (addr) e.master_addr = *addr;
  if (auto port = lookup(env, "MASTER_PORT")) e.master_port = parse_port(*port);
  e.restart_count = count_var(env, "TORCHELASTIC_RESTART_COUNT").value_or(0);
  if (auto agent = lookup(env, "TORCHELASTIC_USE_AGENT_STORE")) {
    // torchrun writes str(bool); torch itself compares with "True".
    FT_CHECK(*agent == "True" || *agent == "False", "TORCHELASTIC_USE_AGENT_STORE=", *agent,
             ": expected True or False, as torchrun sets it");
    e.agent_store = *agent == "True";
  }
  validate(e, {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"});
  if (e.agent_store && e.world_size > 1) {
    FT_CHECK(addr.has_value() && e.master_port != 0,
             "TORCHELASTIC_USE_AGENT_STORE=True says torchrun's agent hosts the rendezvous store, but ",
             addr ? "MASTER_PORT" : "MASTER_ADDR",
             " is not set: torchrun sets MASTER_ADDR and MASTER_PORT to the agent's store next to it. Start the "
             "ranks with torchrun itself, or unset TORCHELASTIC_USE_AGENT_STORE when rank 0 should host the store");
  }
  FT_CHECK(e.world_size == 1 || e.master_port != 0, "WORLD_SIZE=", e.world_size,
           " but MASTER_PORT is not set: rank 0 hosts the rendezvous at MASTER_ADDR:MASTER_PORT, so every rank "
           "needs the same MASTER_PORT (", kLaunchHint, ")");
  return e;
}

RankEnv from_slurm(const EnvMap& env) {
  RankEnv e;
  e.source = "slurm";
  e.rank = parse_count("SLURM_PROCID", *lookup(env, "SLURM_PROCID"));
  auto ntasks = count_var(env, "SLURM_NTASKS");
  FT_CHECK(ntasks.has_value(), "SLURM_PROCID=", e.rank,
           " is set but SLURM_NTASKS is not: run one task per rank with srun --ntasks N (or set RANK and WORLD_SIZE)");
  e.world_size = *ntasks;
  if (auto per_node = lookup(env, "SLURM_NTASKS_PER_NODE")) {
    e.local_world_size = expand_tasks_per_node("SLURM_NTASKS_PER_NODE", *per_node).front();
  } else if (auto tasks_per_node = lookup(env, "SLURM_TASKS_PER_NODE")) {
    const std::vector<int> counts = expand_tasks_per_node("SLURM_TASKS_PER_NODE", *tasks_per_node);
    const int node = count_var(env, "SLURM_NODEID").value_or(0);
    FT_CHECK(node < static_cast<int>(counts.size()), "SLURM_NODEID=", node, " is out of range for SLURM_TASKS_PER_NODE=",
             *tasks_per_node, " (", counts.size(), " nodes)");
    e.local_world_size = counts[node];
  } else if (auto nodes = count_var(env, "SLURM_NNODES")) {
    FT_CHECK(*nodes >= 1 && e.world_size % *nodes == 0, "SLURM_NTASKS=", e.world_size, " does not divide over SLURM_NNODES=",
             *nodes, ": set SLURM_NTASKS_PER_NODE (srun --ntasks-per-node)");
    e.local_world_size = e.world_size / *nodes;
  } else {
    e.local_world_size = e.world_size;
  }
  e.local_rank = count_var(env, "SLURM_LOCALID").value_or(e.rank % std::max(1, e.local_world_size));
  if (auto addr = lookup(env, "MASTER_ADDR")) {
    e.master_addr = *addr;
  } else if (auto list = lookup(env, "SLURM_JOB_NODELIST")) {
    e.master_addr = first_slurm_host(*list);
  } else if (auto list2 = lookup(env, "SLURM_NODELIST")) {
    e.master_addr = first_slurm_host(*list2);
  }
  if (auto port = lookup(env, "MASTER_PORT")) {
    e.master_port = parse_port(*port);
  } else if (auto job = lookup(env, "SLURM_JOB_ID")) {
    // The same on every task of the job, and different for most concurrent jobs.
    e.master_port = 15000 + static_cast<int>(std::strtoull(job->c_str(), nullptr, 10) % 20000);
  }
  validate(e, {"SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_NTASKS_PER_NODE"});
  FT_CHECK(e.world_size == 1 || e.master_port != 0, "SLURM_NTASKS=", e.world_size,
           " but MASTER_PORT is not set and there is no SLURM_JOB_ID to derive one from: export MASTER_PORT "
           "(the same on every task)");
  return e;
}

}  // namespace

std::string RankEnv::describe() const {
  std::string out = str("rank ", rank, " of ", world_size, " (local rank ", local_rank, " of ", local_world_size, ")");
  if (world_size > 1) out += str(", rendezvous at ", master_addr, ":", master_port, agent_store ? " (torchrun's agent store)" : "");
  if (restart_count > 0) out += str(", restart ", restart_count);
  return out + " (" + source + (source == "default" ? ": no rank variables set)" : " variables)");
}

std::string RankEnv::store_prefix() const { return agent_store ? str("/worker/attempt_", restart_count, "/") : ""; }

RankEnv read_rank_env(const EnvMap& env) {
  if (env.count("RANK") == 0 && env.count("SLURM_PROCID") != 0) return from_slurm(env);
  return from_torchrun(env);
}

RankEnv read_rank_env() { return read_rank_env(process_environment()); }

EnvMap process_environment() {
  EnvMap env;
  for (char** p = environ; p != nullptr && *p != nullptr; ++p) {
    const std::string entry(*p);
    const std::size_t eq = entry.find('=');
    if (eq != std::string::npos) env.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return env;
}

std::string first_slurm_host(const std::string& nodelist) {
  // The first top-level item (commas inside brackets separate ranges, not hosts).
  std::string item;
  int depth = 0;
  for (char c : nodelist) {
    if (c == ',' && depth == 0) break;
    if (c == '[') ++depth;
    if (c == ']') --depth;
    item += c;
  }
  // Each bracket group becomes its first value: "[01-04,07]" -> "01".
  std::string host;
  for (std::size_t i = 0; i < item.size(); ++i) {
    if (item[i] != '[') {
      host += item[i];
      continue;
    }
    const std::size_t close = item.find(']', i);
    FT_CHECK(close != std::string::npos, "Slurm node list ", nodelist, ": unbalanced '['");
    const std::string group = item.substr(i + 1, close - i - 1);
    host += group.substr(0, group.find_first_of(",-"));
    i = close;
  }
  FT_CHECK(!host.empty(), "Slurm node list \"", nodelist, "\": expected host names like node[01-04,07]");
  return host;
}

double rendezvous_timeout_s(double config_timeout_s, const EnvMap& env) {
  auto value = lookup(env, "FT_RENDEZVOUS_TIMEOUT");
  if (!value) return config_timeout_s;
  char* end = nullptr;
  const double seconds = std::strtod(value->c_str(), &end);
  FT_CHECK(!value->empty() && end != nullptr && *end == '\0' && seconds > 0, "FT_RENDEZVOUS_TIMEOUT=", *value,
           ": expected a number of seconds > 0");
  return seconds;
}

double rendezvous_timeout_s(double config_timeout_s) {
  return rendezvous_timeout_s(config_timeout_s, process_environment());
}

}  // namespace ft::comm
