// ft_launch: start one process per local rank with torchrun's rank environment, prefix their
// output with "[rank R] ", and stop them all when one fails.
//
//   ft_launch --nproc_per_node 8 ft_train configs/llama13b_zero2.json
//   ft_launch --nnodes 2 --node_rank 0 --master_addr node01 --master_port 29500 --nproc_per_node 8 ft_train CFG
//
// Each child (stdin from /dev/null) gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR and
// MASTER_PORT (a free port when --master_port is not given on a single node), and
// OMP_NUM_THREADS=1 unless it is already set. When a rank fails, the others get SIGTERM (and
// SIGCONT, so that a stopped one can act on it), then SIGKILL after --grace-period seconds
// (default 10), and ft_launch exits with the failing rank's code (128+N for signal N). SIGINT,
// SIGTERM and SIGHUP are passed on to every rank (ft_train then finishes its step, saves a
// checkpoint and exits 0), with SIGKILL after --stop-grace-period seconds (default 600: time to
// save); ft_launch exits 0 when every rank did, else 128+N. A second signal kills at once.
// --max-restarts N: after a rank fails, all ranks are stopped and started again, up
// to N times, with FT_RESTART_COUNT (and torchrun's TORCHELASTIC_RESTART_COUNT) set to the
// attempt; ft_train then continues from the latest complete checkpoint (checkpoint.resume auto).
// With --nnodes > 1 the launchers meet before every start at node 0's --master_addr:--master_port
// (up to --join-timeout seconds, default 600), so a node that comes back rejoins; the ranks' store
// then gets a fresh port from node 0 (node_rendezvous.h). The ranks run in a process group of their own, which is killed at the end, so
// nothing is left behind; each child also dies with ft_launch (PR_SET_PDEATHSIG) should
// ft_launch itself be killed.
//
// This file only parses the command line: the supervision is lib/launch (rank_supervisor.h), its
// decisions a state machine of their own (supervision_state.h).
//
// torchrun works as well, since ft programs read the same variables:
//   torchrun --nproc_per_node 8 --no-python ft_train configs/llama13b_zero2.json   (PyTorch 2.x)
// The flag is --no_python in torch 1.13, and Debian's torch 1.13 torchrun fails at launch on
// Python 3.11 (an IntFlag change breaks its Std.from_str), so use ft_launch there.
#include <iostream>

#include "app_main.h"
#include "launch/launch_options.h"
#include "launch/rank_supervisor.h"

namespace {

int run(int argc, char** argv) {
  ft::launch::Options options;
  try {
    options = ft::launch::parse_options(argc, argv);
  } catch (const ft::launch::UsageError& e) {
    throw ft::app::UsageError{e.what()};
  }
  if (options.help) {
    std::cout << ft::launch::kUsage;
    return 0;
  }
  return ft::launch::supervise(options);
}

}  // namespace

int main(int argc, char** argv) { return ft::app::run_main("ft_launch", argc, argv, run); }
