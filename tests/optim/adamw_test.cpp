// ft::optim::AdamW against torch.optim.AdamW (tests/data/optim_reference.json): parameters and
// both moments after every one of 12 steps, three hyper-parameter sets, weight decay on w1 and w2
// but not on b. Tolerance 1e-6 relative (see max_rel_error): the fused loop reproduces PyTorch's
// AVX2/AVX-512 kernels operation for operation, so on such CPUs the error is 0; the tolerance
// leaves room for a reference regenerated where PyTorch runs its non-FMA kernels (1 ulp = 6e-8).
// Also: fused == tensor-op path on a large buffer, thread-count and sharding independence, state
// save/restore, and the error messages.
#include <gtest/gtest.h>

#include <ATen/Parallel.h>

#include <cstdio>

#include "optim/adamw.h"
#include "optim_test_util.h"
#include "util/torch_version.h"

namespace ft::optim {
namespace {

using test::max_rel_error;
using test::reference;
using test::vec;

constexpr double kTolerance = 1e-6;

std::vector<DecaySegment> reference_segments() {
  std::vector<DecaySegment> out;
  for (const Json& s : reference()["adamw"]["segments"]) {
    out.push_back({s["offset"].get<std::int64_t>(), s["length"].get<std::int64_t>(), s["decay"].get<bool>()});
  }
  return out;
}

AdamWOptions case_options(const Json& c, bool fused) {
  AdamWOptions o;
  o.beta1 = c["beta1"];
  o.beta2 = c["beta2"];
  o.eps = c["eps"];
  o.weight_decay = c["weight_decay"];
  o.fused_cpu = fused;
  return o;
}

// Runs every reference case through AdamW and checks each step; returns the largest error seen.
double run_reference(bool fused) {
  const std::int64_t numel = reference()["adamw"]["numel"];
  double worst = 0;
  for (const Json& c : reference()["adamw"]["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    AdamW opt(numel, reference_segments(), case_options(c, fused));
    torch::Tensor params = vec(c["initial_params"]);
    int k = 0;
    for (const Json& s : c["steps"]) {
      SCOPED_TRACE("step " + std::to_string(k++));
      opt.step(params, vec(s["grad"]), s["lr"].get<double>());
      EXPECT_EQ(opt.step_count(), s["step"].get<std::int64_t>());
      const double e = std::max({max_rel_error(params, vec(s["params"])),
                                 max_rel_error(opt.state().exp_avg, vec(s["exp_avg"])),
                                 max_rel_error(opt.state().exp_avg_sq, vec(s["exp_avg_sq"]))});
      EXPECT_LE(e, kTolerance);
      worst = std::max(worst, e);
    }
  }
  return worst;
}

TEST(AdamW, FusedCpuMatchesTorchAfterEveryStep) {
  const double worst = run_reference(/*fused=*/true);
  std::printf("fused CPU AdamW vs torch.optim.AdamW: max relative error %.3g\n", worst);
}

TEST(AdamW, TensorOpPathMatchesTorchAfterEveryStep) {
  // The path CUDA tensors take, run here on the CPU.
  const double worst = run_reference(/*fused=*/false);
  std::printf("tensor-op AdamW vs torch.optim.AdamW: max relative error %.3g\n", worst);
}

// A buffer spanning many parallel_for tasks, with segments that straddle task boundaries.
struct BigProblem {
  std::int64_t numel = (1 << 20) + 12345;
  std::vector<DecaySegment> segments;
  torch::Tensor params, grads[3];
  BigProblem() {
    std::int64_t offset = 0;
    bool decay = true;
    for (std::int64_t length : {1, 4095, 300000, 7, 262144, 0, 33, 200000}) {
      segments.push_back({offset, length, decay});
      offset += length;
      decay = !decay;
    }
    segments.push_back({offset, numel - offset, false});
    auto gen = at::detail::createCPUGenerator(11);
    params = torch::randn({numel}, gen);
    for (auto& g : grads) g = torch::randn({numel}, gen) * 0.1;
  }
  torch::Tensor run(AdamWOptions options, AdamW* out_opt = nullptr) const {
    AdamW opt(numel, segments, options);
    torch::Tensor p = params.clone();
    const double lrs[3] = {0.0, 1e-3, 3e-3};
    for (int k = 0; k < 3; ++k) opt.step(p, grads[k], lrs[k]);
    if (out_opt != nullptr) *out_opt = opt;
    return p;
  }
};

// The fused loop reproduces LibTorch 1.13's kernels: there the two paths agree element by element
// (max_rel_error, 1e-6 of each element). LibTorch 2.x's add_(alpha) and addcdiv_ fuse the multiply
// and the add (one rounding instead of two), so where terms cancel an element near zero differs by
// an ulp of the terms rather than of itself, and how large that is relative to the element depends
// on the kernel the CPU gets (2.0e-6 measured on an earlier machine; 9.5e-5 on an AVX2-only one, at an
// element 1e-6 of the largest). On 2.x the paths are held to a few ulps of the largest entry
// instead. The fused path itself is held to PyTorch's optimizer at kTolerance by the reference
// test above, on every build.
double max_error(const torch::Tensor& actual, const torch::Tensor& expected) {
#if FT_TORCH_AT_LEAST(2, 0)
  const auto a = actual.to(torch::kDouble), b = expected.to(torch::kDouble);
  return ((a - b).abs().max() / b.abs().max()).item<double>();
#else
  return max_rel_error(actual, expected);
#endif
}
#if FT_TORCH_AT_LEAST(2, 0)
constexpr double kTensorOpsTolerance = 5e-7;  // 4 ulps of fp32 (2^-21)
#else
constexpr double kTensorOpsTolerance = kTolerance;
#endif

TEST(AdamW, FusedEqualsTensorOpsOnALargeSegmentedBuffer) {
  BigProblem problem;
  AdamWOptions options;
  options.weight_decay = 0.1;
  AdamW fused_opt(0, {}, options), ops_opt(0, {}, options);
  const torch::Tensor fused = problem.run(options, &fused_opt);
  options.fused_cpu = false;
  const torch::Tensor ops = problem.run(options, &ops_opt);
  const double params = max_error(fused, ops);
  const double exp_avg = max_error(fused_opt.state().exp_avg, ops_opt.state().exp_avg);
  const double exp_avg_sq = max_error(fused_opt.state().exp_avg_sq, ops_opt.state().exp_avg_sq);
  EXPECT_LE(params, kTensorOpsTolerance);
  EXPECT_LE(exp_avg, kTensorOpsTolerance);
  EXPECT_LE(exp_avg_sq, kTensorOpsTolerance);
  std::printf("fused vs tensor-op AdamW, 1M elements: params %.3g, exp_avg %.3g, exp_avg_sq %.3g\n", params, exp_avg,
              exp_avg_sq);
  EXPECT_FALSE(torch::equal(fused, problem.params));  // and something did happen
}

TEST(AdamW, FusedResultDoesNotDependOnThreadCount) {
  BigProblem problem;
  AdamWOptions options;
  options.weight_decay = 0.05;
  const int saved = at::get_num_threads();
  at::set_num_threads(1);
  const torch::Tensor one = problem.run(options);
  at::set_num_threads(3);
  const torch::Tensor three = problem.run(options);
  at::set_num_threads(saved);
  EXPECT_TRUE(torch::equal(one, three));
}

TEST(AdamW, ShardsGiveTheUnshardedResultBitForBit) {
  // What ZeRO does: each rank updates its slice with slice_segments() of the full layout.
  BigProblem problem;
  AdamWOptions options;
  options.weight_decay = 0.1;
  const torch::Tensor full = problem.run(options);
  const std::int64_t cut = 300017;  // inside the 300000-element segment
  torch::Tensor sharded = problem.params.clone();
  for (auto [offset, length] : {std::pair<std::int64_t, std::int64_t>{0, cut}, {cut, problem.numel - cut}}) {
    AdamW opt(length, slice_segments(problem.segments, offset, length), options);
    torch::Tensor p = sharded.narrow(0, offset, length);  // a view: updated in place
    const double lrs[3] = {0.0, 1e-3, 3e-3};
    for (int k = 0; k < 3; ++k) opt.step(p, problem.grads[k].narrow(0, offset, length).contiguous(), lrs[k]);
  }
  EXPECT_TRUE(torch::equal(full, sharded));
}

TEST(AdamW, SliceSegmentsRenumbersFromZero) {
  const std::vector<DecaySegment> full = {{0, 10, true}, {10, 5, false}, {15, 20, true}};
  const auto s = slice_segments(full, 8, 10);  // elements 8..17
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].offset, 0);
  EXPECT_EQ(s[0].length, 2);
  EXPECT_TRUE(s[0].decay);
  EXPECT_EQ(s[1].offset, 2);
  EXPECT_EQ(s[1].length, 5);
  EXPECT_FALSE(s[1].decay);
  EXPECT_EQ(s[2].offset, 7);
  EXPECT_EQ(s[2].length, 3);
  const auto empty = slice_segments(full, 35, 0);
  ASSERT_EQ(empty.size(), 1u);
  EXPECT_EQ(empty[0].length, 0);
  EXPECT_FT_ERROR(slice_segments(full, 30, 6), "elements [30, 36) are not inside the buffer of 35 elements");
}

TEST(AdamW, SaveAndRestoreContinuesIdentically) {
  const Json& c = reference()["adamw"]["cases"][1];
  const std::int64_t numel = reference()["adamw"]["numel"];
  const Json& steps = c["steps"];
  AdamW uninterrupted(numel, reference_segments(), case_options(c, true));
  torch::Tensor p_ref = vec(c["initial_params"]);
  for (const Json& s : steps) uninterrupted.step(p_ref, vec(s["grad"]), s["lr"].get<double>());

  AdamW first(numel, reference_segments(), case_options(c, true));
  torch::Tensor p = vec(c["initial_params"]);
  const std::size_t resume_at = 5;
  for (std::size_t k = 0; k < resume_at; ++k) first.step(p, vec(steps[k]["grad"]), steps[k]["lr"].get<double>());
  // What a checkpoint does: copy the tensors out (they alias live state), later load them.
  std::map<std::string, torch::Tensor> saved;
  for (const auto& [key, t] : first.state_tensors()) saved[key] = t.clone();
  EXPECT_EQ(saved.at("step").item<std::int64_t>(), 5);
  first.step(p.clone(), vec(steps[5]["grad"]), 1.0);  // must not leak into `saved`

  AdamW resumed(numel, reference_segments(), case_options(c, true));
  resumed.load_state_tensors(saved, "step_000005/optimizer.safetensors");
  EXPECT_EQ(resumed.step_count(), 5);
  for (std::size_t k = resume_at; k < steps.size(); ++k) {
    resumed.step(p, vec(steps[k]["grad"]), steps[k]["lr"].get<double>());
  }
  EXPECT_TRUE(torch::equal(p, p_ref));
  EXPECT_TRUE(torch::equal(resumed.state().exp_avg, uninterrupted.state().exp_avg));
  EXPECT_TRUE(torch::equal(resumed.state().exp_avg_sq, uninterrupted.state().exp_avg_sq));
  EXPECT_EQ(resumed.step_count(), uninterrupted.step_count());
}

TEST(AdamW, ErrorsNameWhatWasExpected) {
  const AdamWOptions o;
  EXPECT_FT_ERROR(AdamW(10, {{0, 4, true}, {5, 5, false}}, o),
                  "weight-decay segment 1 starts at 5, expected 4 (segments must be in order and cover the buffer");
  EXPECT_FT_ERROR(AdamW(10, {{0, 4, true}}, o), "weight-decay segments cover 4 elements, but the buffer has 10");
  EXPECT_FT_ERROR(AdamW(10, {{0, -1, true}}, o), "weight-decay segment 0 has negative length -1");
  AdamWOptions bad = o;
  bad.beta2 = 1.0;
  EXPECT_FT_ERROR(AdamW(10, uniform_segments(10, true), bad), "AdamW: beta2 must be in [0, 1), got 1");
  bad = o;
  bad.weight_decay = -0.1;
  EXPECT_FT_ERROR(AdamW(10, uniform_segments(10, true), bad), "AdamW: weight_decay must be >= 0, got -0.1");

  AdamW opt(10, uniform_segments(10, true), o);
  const auto p = torch::zeros({10});
  EXPECT_FT_ERROR(opt.step(p, torch::zeros({12}), 1e-3),
                  "AdamW::step: grad must be a contiguous float [10] tensor on cpu, got float [12] on cpu");
  EXPECT_FT_ERROR(opt.step(p.to(torch::kHalf), torch::zeros({10}), 1e-3),
                  "AdamW::step: params must be a contiguous float [10] tensor on cpu, got c10::Half [10] on cpu");
  EXPECT_FT_ERROR(opt.step(torch::zeros({10, 2}).select(1, 0), torch::zeros({10}), 1e-3), "(not contiguous)");
  EXPECT_FT_ERROR(opt.step(p, torch::zeros({10}), -1.0), "AdamW::step: lr must be a finite number >= 0, got -1");
  EXPECT_EQ(opt.step_count(), 0);  // nothing happened

  auto state = opt.state_tensors();
  state.erase("exp_avg_sq");
  EXPECT_FT_ERROR(opt.load_state_tensors(state, "ckpt/optim.safetensors"),
                  "ckpt/optim.safetensors: AdamW state has no 'exp_avg_sq' (found: exp_avg, step)");
  state = opt.state_tensors();
  state["momentum"] = torch::zeros({10});
  EXPECT_FT_ERROR(opt.load_state_tensors(state, "ckpt/optim.safetensors"),
                  "ckpt/optim.safetensors: unexpected AdamW state tensor 'momentum' "
                  "(expected step, exp_avg, exp_avg_sq)");
  state = opt.state_tensors();
  state["exp_avg"] = torch::zeros({8});
  EXPECT_FT_ERROR(opt.load_state_tensors(state, "ckpt/optim.safetensors"),
                  "ckpt/optim.safetensors: AdamW state: 'exp_avg' must be a float [10] tensor, got float [8] on cpu "
                  "(hint: was the checkpoint written for another model, LoRA config or world size?)");
  state = opt.state_tensors();
  state["step"] = torch::zeros({1});
  EXPECT_FT_ERROR(opt.load_state_tensors(state, "ckpt/optim.safetensors"),
                  "ckpt/optim.safetensors: AdamW state 'step' must be a one-element integer tensor, got float [1]");
  EXPECT_FT_ERROR(opt.load_state({-1, torch::zeros({10}), torch::zeros({10})}), "AdamW state: step must be >= 0");
}

}  // namespace
}  // namespace ft::optim
