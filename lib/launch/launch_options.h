// ft_launch's command line: how many ranks on how many nodes, where rank 0's store is, how long
// ranks get to stop, how often to restart them, and the PROGRAM each rank runs.
#pragma once

#include <string>
#include <vector>

#include "util/error.h"

namespace ft::launch {

// A command line ft_launch cannot run; the message names the flag and what was expected.
// (ft_launch reports it as a usage error: exit code 2.)
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& message) : Error(message) {}
};

struct Options {
  bool help = false;  // -h/--help: print kUsage, start nothing
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr;    // 127.0.0.1 unless given
  int master_port = 0;        // 0: a free port, picked anew for every start
  double grace_s = 10;        // after a rank failed
  double stop_grace_s = 600;  // after a signal was passed on: the ranks save a checkpoint
  int max_restarts = 0;       // restarts of all ranks after a rank failed
  double join_timeout_s = 600;  // --nnodes > 1 with --max-restarts: how long the launchers wait for each other
  std::vector<std::string> command;  // PROGRAM [ARGS...]
};

extern const char* const kUsage;

// argv[1..argc) as torchrun spells its flags (--nproc_per_node or --nproc-per-node, "--flag V" or
// "--flag=V"); the first argument that is not a flag (or everything after "--") is PROGRAM.
// Throws UsageError.
Options parse_options(int argc, const char* const* argv);

}  // namespace ft::launch
