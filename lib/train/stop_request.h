// Preemption. ft_train installs handlers for SIGTERM and SIGINT (what a scheduler or Ctrl-C sends,
// and what ft_launch and torchrun pass on to every rank). While the training loop runs, the first
// one only raises a flag: every rank finishes the step it is in, the ranks agree (the flag rides
// on the step's loss all-reduce), save a checkpoint and exit 0. A second signal, or one that
// arrives outside the loop (loading, preparing data, writing results), ends the process at once
// as it would without a handler.
#pragma once

namespace ft::train {

void install_stop_handlers();
// The loop calls this with true when it starts and false when it ends.
void set_stop_honoured(bool honoured);
// Whether this process got a stop signal while the loop honoured it.
bool stop_requested();
// The signal that asked (0 when none).
int stop_signal();

}  // namespace ft::train
