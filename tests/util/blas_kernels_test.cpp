// Which OpenBLAS kernel set replaces a fallback (util/blas_kernels.h). The restart itself is
// tested with ft_doctor as a user runs it (tests/gpu/doctor_test.cpp).
#include <gtest/gtest.h>

#include "util/blas_kernels.h"

namespace ft {
namespace {

TEST(BlasKernels, AFallbackIsReplacedByTheBestSetTheCpuRuns) {
  const CpuVectorFeatures avx512{true, true}, avx2{true, false}, sse{false, false};
  EXPECT_EQ(better_openblas_core("Prescott", avx512), "SkylakeX");
  EXPECT_EQ(better_openblas_core("Nehalem", avx512), "SkylakeX");
  EXPECT_EQ(better_openblas_core("Prescott", avx2), "Haswell");
  EXPECT_EQ(better_openblas_core("Sandybridge", avx2), "Haswell");
  EXPECT_EQ(better_openblas_core("Prescott", sse), "");
}

TEST(BlasKernels, ASetOpenBlasChoseOnPurposeIsKept) {
  const CpuVectorFeatures avx512{true, true};
  for (const char* core : {"Haswell", "SkylakeX", "Cooperlake", "SapphireRapids", "Zen", ""})
    EXPECT_EQ(better_openblas_core(core, avx512), "") << core;
}

}  // namespace
}  // namespace ft
