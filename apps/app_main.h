// The shared main() wrapper of every ft_* program: runs the program body, turns ft::Error
// (and any other exception) into a one-line "PROGRAM: error: ..." and a non-zero exit code.
#pragma once

#include <functional>
#include <string>

namespace ft::app {

// Whether a program multiplies matrices. One that does first starts over with OpenBLAS's fast
// kernels when OpenBLAS chose a fallback for this CPU (util/blas_kernels.h); one that does not
// (ft_plan's arithmetic, ft_prep's tokenizing) spares itself that restart and its message.
enum class MatrixProducts { kYes, kNo };

// Exit codes: 0 ok, 1 ft::Error (bad input, failed check), 2 usage error, 3 internal error.
int run_main(const char* program, int argc, char** argv, const std::function<int(int, char**)>& body,
             MatrixProducts matrix_products = MatrixProducts::kYes);

// Thrown by argument parsing helpers for usage errors (exit code 2).
struct UsageError {
  std::string message;
};

}  // namespace ft::app
