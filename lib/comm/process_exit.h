// Ending a process after a communication failure. When a collective fails, a Gloo or NCCL thread
// may stay blocked inside the library for good (a peer that stopped, a connection that never
// closes). The communicators never wait for such a thread themselves (a failed communicator
// leaks its process group instead of joining it), but static destructors at exit() may still run
// while it is blocked, and crash or hang. So an app that communicates ends main() like this:
//
//   int main(int argc, char** argv) {
//     return ft::comm::exit_process(ft::app::run_main("ft_train", argc, argv, run));
//   }
//
// run_main has printed the error by then; exit_process returns the code unchanged when no
// communicator failed in this process, and otherwise flushes stdout/stderr and ends the process
// at once with std::_Exit(code). lib/ itself never exits: it throws ft::Error.
#pragma once

namespace ft::comm {

// Called by the communicators when a collective fails or times out.
void note_communication_failure();
bool communication_failed();

int exit_process(int code);

}  // namespace ft::comm
