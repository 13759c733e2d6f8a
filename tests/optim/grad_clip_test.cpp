// Gradient norm and clipping against torch.nn.utils.clip_grad_norm_ (optim_reference.json).
// PyTorch reduces in fp32 and ft in double, so the norms agree to fp32 precision: 1e-6 relative.
// Also: non-finite norms are reported and leave the gradients alone, grad_clip 0 is off, shards
// add up to the whole, the CPU sum is thread-count independent, and the error messages.
#include <gtest/gtest.h>

#include <ATen/Parallel.h>

#include <cmath>

#include "optim/grad_clip.h"
#include "optim_test_util.h"

namespace ft::optim {
namespace {

std::vector<torch::Tensor> grads_of(const Json& c) {
  std::vector<torch::Tensor> out;
  for (const Json& g : c["grads"]) out.push_back(test::vec(g));
  return out;
}

TEST(GradClip, MatchesTorchClipGradNorm) {
  int finite_cases = 0;
  for (const Json& c : test::reference()["clip"]) {
    const std::string kind = c["kind"];
    const double max_norm = c["max_norm"];
    SCOPED_TRACE(kind + " max_norm " + std::to_string(max_norm));
    auto grads = grads_of(c);
    const auto before = grads_of(c);
    const ClipResult r = clip_grad_norm_(grads, max_norm);
    const double expected = test::number(c["total_norm"]);
    if (kind == "finite") {
      ++finite_cases;
      EXPECT_TRUE(r.finite);
      EXPECT_NEAR(r.total_norm, expected, 1e-6 * expected);
      for (std::size_t i = 0; i < grads.size(); ++i) {
        EXPECT_LE(test::max_rel_error(grads[i], test::vec(c["clipped"][i])), 1e-6);
      }
    } else {
      EXPECT_FALSE(r.finite);
      EXPECT_EQ(std::isnan(r.total_norm), std::isnan(expected));
      EXPECT_EQ(std::isinf(r.total_norm), std::isinf(expected));
      for (std::size_t i = 0; i < grads.size(); ++i) {
        EXPECT_TRUE(torch::allclose(grads[i], before[i], 0, 0, /*equal_nan=*/true));  // left alone
      }
    }
  }
  EXPECT_EQ(finite_cases, 4);
}

TEST(GradClip, ZeroMaxNormIsOff) {
  std::vector<torch::Tensor> grads = {torch::full({3}, 100.0f), torch::full({2}, -100.0f)};
  const ClipResult r = clip_grad_norm_(grads, 0.0);
  EXPECT_NEAR(r.total_norm, 100.0 * std::sqrt(5.0), 1e-9);
  EXPECT_EQ(r.coefficient, 1.0);
  EXPECT_TRUE(torch::equal(grads[0], torch::full({3}, 100.0f)));
}

TEST(GradClip, ShardedSumOfSquaresAddsUpToTheWhole) {
  // What ZeRO/FSDP do: each rank sums its shard, the sums are all-reduced, then one sqrt.
  auto gen = at::detail::createCPUGenerator(3);
  const auto flat = torch::randn({1000003}, gen);
  const double whole = local_sum_of_squares({flat}).item<double>();
  const double halves = local_sum_of_squares({flat.narrow(0, 0, 400000)}).item<double>() +
                        local_sum_of_squares({flat.narrow(0, 400000, 600003)}).item<double>();
  EXPECT_NEAR(halves, whole, 1e-12 * whole);
  EXPECT_NEAR(global_norm(local_sum_of_squares({flat})), flat.to(torch::kDouble).norm().item<double>(),
              1e-12 * whole);
  const double coef = clip_coefficient(std::sqrt(halves), 1.0);
  EXPECT_NEAR(coef, 1.0 / (std::sqrt(whole) + 1e-6), 1e-15);
  EXPECT_EQ(clip_coefficient(0.5, 1.0), 1.0);
}

TEST(GradClip, CpuSumDoesNotDependOnThreadCount) {
  auto gen = at::detail::createCPUGenerator(5);
  const std::vector<torch::Tensor> grads = {torch::randn({3000001}, gen), torch::randn({77}, gen),
                                            torch::randn({40, 30}, gen).t()};  // non-contiguous too
  const int saved = at::get_num_threads();
  at::set_num_threads(1);
  const double one = local_sum_of_squares(grads).item<double>();
  at::set_num_threads(3);
  const double three = local_sum_of_squares(grads).item<double>();
  at::set_num_threads(saved);
  EXPECT_EQ(one, three);
}

TEST(GradClip, OtherDtypesAndEmptyLists) {
  EXPECT_EQ(local_sum_of_squares({}).item<double>(), 0.0);
  EXPECT_EQ(local_sum_of_squares({torch::Tensor(), torch::zeros({0})}).item<double>(), 0.0);
  const auto half = torch::full({4}, 300.0f).to(torch::kHalf);  // 300^2 overflows fp16, not the sum
  EXPECT_DOUBLE_EQ(local_sum_of_squares({half}).item<double>(), 4 * 90000.0);
}

TEST(GradClip, Errors) {
  EXPECT_FT_ERROR(clip_grad_norm_({torch::ones({2})}, -1.0), "grad_clip must be a finite number >= 0, got -1");
  EXPECT_FT_ERROR(local_sum_of_squares({torch::ones({2}, torch::kLong)}),
                  "gradient norm: expected floating-point gradients, got long int");
  EXPECT_THROW(clip_coefficient(INFINITY, 1.0), InternalError);  // callers check finiteness first
}

}  // namespace
}  // namespace ft::optim
