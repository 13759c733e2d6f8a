// bench_adamw: the fused CPU AdamW step (ft::optim::AdamW) against LibTorch's own
// torch::optim::AdamW on the same flat fp32 buffer, at each thread count asked for. This is the
// host-side update of offloaded optimizer state, and it is memory-bound: GB/s counts the state
// one step must touch (read param, grad, exp_avg, exp_avg_sq; write param, exp_avg, exp_avg_sq =
// 28 bytes per element), whatever extra traffic an implementation makes.
//   bench_adamw                                  # 50M elements, 1 and 2 threads
//   bench_adamw --numel 10000000 --threads 1,2,4 --steps 10
#include <cxxopts.hpp>

#include <cstdio>
#include <iostream>
#include <sstream>

#include <torch/torch.h>

#include "app_main.h"
#include "optim/adamw.h"
#include "util/error.h"
#include "util/timer.h"

namespace {

constexpr double kLr = 1e-3, kWeightDecay = 0.01;
constexpr double kBytesPerElement = 7 * sizeof(float);

std::vector<int> parse_threads(const std::string& list) {
  std::vector<int> out;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    const int n = std::atoi(item.c_str());
    FT_CHECK(n > 0, "--threads: expected a comma-separated list of positive integers, got \"", list, "\"");
    out.push_back(n);
  }
  return out;
}

// Seconds per step over `steps` steps, after one warm-up step (first touch of the state).
template <typename Step>
double time_steps(int steps, Step&& step) {
  step();
  ft::Stopwatch watch;
  for (int i = 0; i < steps; ++i) step();
  return watch.seconds() / steps;
}

int run(int argc, char** argv) {
  cxxopts::Options options("bench_adamw", "Fused CPU AdamW vs torch::optim::AdamW on one flat fp32 buffer.");
  options.add_options()
      ("numel", "elements in the buffer", cxxopts::value<std::int64_t>()->default_value("50000000"))
      ("steps", "timed steps per measurement", cxxopts::value<int>()->default_value("5"))
      ("threads", "comma-separated thread counts", cxxopts::value<std::string>()->default_value("1,2"))
      ("h,help", "show this help");
  auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::cout << options.help() << std::endl;
    return 0;
  }
  const std::int64_t numel = args["numel"].as<std::int64_t>();
  const int steps = args["steps"].as<int>();
  FT_CHECK(numel > 0 && steps > 0, "--numel and --steps must be > 0");

  auto gen = at::detail::createCPUGenerator(1);
  const torch::Tensor init = torch::randn({numel}, gen);
  const torch::Tensor grad = torch::randn({numel}, gen) * 1e-2;

  ft::optim::AdamWOptions fused_options;
  fused_options.weight_decay = kWeightDecay;
  ft::optim::AdamW fused(numel, ft::optim::uniform_segments(numel, true), fused_options);
  torch::Tensor fused_params = init.clone();

  torch::Tensor torch_params = init.clone().requires_grad_(true);
  torch_params.mutable_grad() = grad.clone();
  const auto reference_options =
      torch::optim::AdamWOptions(kLr).betas({0.9, 0.999}).eps(1e-8).weight_decay(kWeightDecay);
  torch::optim::AdamW reference({torch_params}, reference_options);

  std::printf("buffer: %lld fp32 elements (%.0f MB per array), %.2f GB of state touched per step, %d steps\n",
              (long long)numel, numel * 4.0 / 1e6, numel * kBytesPerElement / 1e9, steps);
  std::printf("%-8s %-28s %10s %10s %8s\n", "threads", "implementation", "ms/step", "GB/s", "speedup");
  for (int threads : parse_threads(args["threads"].as<std::string>())) {
    torch::set_num_threads(threads);
    FT_CHECK(torch::get_num_threads() == threads, "asked LibTorch for ", threads, " threads, got ",
             torch::get_num_threads());
    const double t_fused = time_steps(steps, [&] { fused.step(fused_params, grad, kLr); });
    const double t_torch = time_steps(steps, [&] { reference.step(); });
    const double gb = numel * kBytesPerElement / 1e9;
    std::printf("%-8d %-28s %10.1f %10.2f %8s\n", threads, "torch::optim::AdamW", t_torch * 1e3, gb / t_torch, "1.00x");
    std::printf("%-8d %-28s %10.1f %10.2f %7.2fx\n", threads, "ft::optim::AdamW (fused)", t_fused * 1e3,
                gb / t_fused, t_torch / t_fused);
  }
  // Both took the same number of steps with the same gradient and lr: they must agree.
  const double diff = (fused_params - torch_params.detach()).abs().max().item<double>();
  std::printf("after %lld steps each: max |param difference| = %.3g\n", (long long)fused.step_count(), diff);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ft::app::run_main("bench_adamw", argc, argv, run); }
