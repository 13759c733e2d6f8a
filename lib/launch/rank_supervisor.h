// ft_launch's supervision of its ranks: start one process per local rank with the rank
// environment (rank_environment.h), pass their output on line by line with "[rank R] "
// (rank_output.h), pass SIGINT, SIGTERM and SIGHUP on, stop every rank when one fails, kill the
// ones that outlive the grace period, and restart them all after a failure (--max-restarts). What
// to do when is decided by SupervisionState (supervision_state.h); this performs it.
//
// The ranks run in a process group of their own (the first rank's pid), which is killed before
// the last rank is reaped, so nothing is left behind; each rank also dies with ft_launch
// (PR_SET_PDEATHSIG) should ft_launch itself be killed. stdin is /dev/null.
#pragma once

#include "launch/launch_options.h"

namespace ft::launch {

// Runs o.command on o.nproc_per_node ranks until they are done; returns ft_launch's exit code.
// Installs ft_launch's handlers of SIGINT, SIGTERM, SIGHUP and SIGCHLD, and ignores SIGPIPE.
int supervise(const Options& o);

}  // namespace ft::launch
