// The shared main() wrapper of every ft_* program: runs the program body, turns ft::Error
// (and any other exception) into a one-line "PROGRAM: error: ..." and a non-zero exit code.
#pragma once

#include <functional>
#include <string>

namespace ft::app {

// Programs that map LibTorch first start over with OpenBLAS's fast kernels when it chose a
// fallback for this CPU (util/blas_kernels.h).
// Exit codes: 0 ok, 1 ft::Error (bad input, failed check), 2 usage error, 3 internal error.
int run_main(const char* program, int argc, char** argv, const std::function<int(int, char**)>& body);

// Thrown by argument parsing helpers for usage errors (exit code 2).
struct UsageError {
  std::string message;
};

}  // namespace ft::app
