#include "launch/rank_environment.h"

#include <map>

namespace ft::launch {

std::vector<std::string> rank_environment(const char* const* inherited, const Options& o, int local_rank, int port,
                                          int restart) {
  std::map<std::string, std::string> env;
  for (const char* const* p = inherited; p != nullptr && *p != nullptr; ++p) {
    const std::string entry(*p);
    const std::size_t eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  if (env.count("OMP_NUM_THREADS") == 0) env["OMP_NUM_THREADS"] = "1";
  env["WORLD_SIZE"] = std::to_string(o.nproc_per_node * o.nnodes);
  env["LOCAL_WORLD_SIZE"] = std::to_string(o.nproc_per_node);
  env["GROUP_RANK"] = std::to_string(o.node_rank);
  env["MASTER_ADDR"] = o.master_addr;
  env["MASTER_PORT"] = std::to_string(port);
  env["FT_RESTART_COUNT"] = std::to_string(restart);
  env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(restart);
  env["RANK"] = std::to_string(o.node_rank * o.nproc_per_node + local_rank);
  env["LOCAL_RANK"] = std::to_string(local_rank);
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [name, value] : env) out.push_back(name + "=" + value);
  return out;
}

}  // namespace ft::launch
