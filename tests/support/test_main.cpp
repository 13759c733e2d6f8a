// main() of every test program: the OpenBLAS kernel check of the ft_* programs first (so that a
// test's own matrix products and those of the programs it starts use the same kernels), then
// GoogleTest.
#include <gtest/gtest.h>

#include "util/blas_kernels.h"

int main(int argc, char** argv) {
  ft::restart_with_fast_blas_kernels(argv);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
