// bench_quantized_linear: forward + backward (dL/dx; the base is frozen) of one LLaMA-7B linear
// layer with its weight dense, int8 or NF4 (model/quantized_linear.h), and the dequantization
// alone. A quantized layer pays for dequantizing its weight twice per step (forward, backward):
// this measures how much that costs next to the matrix products.
//   bench_quantized_linear                                      # 7B shapes, 512 tokens, fp32
//   bench_quantized_linear --tokens 2048 --dtype bf16 --threads 2 --steps 5
//   bench_quantized_linear --device cuda                        # on a CUDA build with a GPU
#include <cxxopts.hpp>

#include <cstdio>
#include <iostream>

#include <torch/torch.h>

#include "app_main.h"
#include "io/dtype.h"
#include "model/quantization.h"
#include "model/quantized_linear.h"
#include "util/error.h"
#include "util/timer.h"

namespace {

using ft::model::Quantization;

void synchronize(const torch::Device& device) {
  // A device-to-host copy of a scalar waits for the queued work on CUDA; free on the CPU.
  if (!device.is_cpu()) torch::zeros({1}, torch::TensorOptions().device(device)).item<float>();
}

template <typename Fn>
double seconds_per_call(int steps, const torch::Device& device, Fn&& fn) {
  fn();  // warm-up: first touch, kernel selection
  synchronize(device);
  ft::Stopwatch watch;
  for (int i = 0; i < steps; ++i) fn();
  synchronize(device);
  return watch.seconds() / steps;
}

int run(int argc, char** argv) {
  cxxopts::Options options("bench_quantized_linear", "Dense vs int8 vs NF4 linear layer, forward + backward.");
  options.add_options()
      ("tokens", "rows of x (micro-batch x sequence length)", cxxopts::value<std::int64_t>()->default_value("512"))
      ("hidden", "hidden size (LLaMA-7B: 4096)", cxxopts::value<std::int64_t>()->default_value("4096"))
      ("intermediate", "MLP size (LLaMA-7B: 11008)", cxxopts::value<std::int64_t>()->default_value("11008"))
      ("dtype", "compute dtype fp32 | bf16 | fp16", cxxopts::value<std::string>()->default_value("fp32"))
      ("device", "cpu | cuda", cxxopts::value<std::string>()->default_value("cpu"))
      ("threads", "CPU threads", cxxopts::value<int>()->default_value("2"))
      ("steps", "timed calls per measurement", cxxopts::value<int>()->default_value("3"))
      ("h,help", "show this help");
  auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::cout << options.help() << std::endl;
    return 0;
  }
  torch::set_num_threads(args["threads"].as<int>());
  const std::int64_t tokens = args["tokens"].as<std::int64_t>();
  const std::int64_t hidden = args["hidden"].as<std::int64_t>(), inter = args["intermediate"].as<std::int64_t>();
  const int steps = args["steps"].as<int>();
  const auto dtype = ft::io::parse_float_dtype(args["dtype"].as<std::string>(), "--dtype");
  const torch::Device device(args["device"].as<std::string>());
  FT_CHECK(tokens > 0 && hidden > 0 && inter > 0 && steps > 0, "sizes and --steps must be positive");

  std::printf("x [%lld, in] in %s on %s, %d threads, %d timed calls; times in ms\n", (long long)tokens,
              c10::toString(dtype), device.str().c_str(), torch::get_num_threads(), steps);
  std::printf("%-22s %-6s %9s %9s %9s %8s %10s %9s\n", "layer [out x in]", "weight", "MB", "fwd+bwd", "dequant",
              "vs dense", "GFLOP/s", "rel.err");
  const std::pair<const char*, std::pair<std::int64_t, std::int64_t>> shapes[] = {
      {"q_proj", {hidden, hidden}}, {"gate_proj", {inter, hidden}}, {"down_proj", {hidden, inter}}};
  auto gen = at::detail::createCPUGenerator(1);
  for (const auto& [name, shape] : shapes) {
    const auto [out, in] = shape;
    const torch::Tensor w32 = torch::randn({out, in}, gen) * 0.02;
    const torch::Tensor x = (torch::randn({tokens, in}, gen)).to(device, dtype).requires_grad_(true);
    const torch::Tensor upstream = torch::randn({tokens, out}, gen).to(device, dtype);
    const double flops = 2.0 * 2.0 * static_cast<double>(tokens) * out * in;  // forward + dL/dx
    double dense_time = 0;
    for (Quantization q : {Quantization::kNone, Quantization::kInt8, Quantization::kNf4}) {
      double seconds = 0, dequant = 0, mb = 0, err = 0;
      if (q == Quantization::kNone) {
        const torch::Tensor w = w32.to(device, dtype);
        mb = w.nbytes() / 1e6;
        seconds = seconds_per_call(steps, device, [&] {
          auto y = torch::nn::functional::linear(x, w);
          y.backward(upstream);
        });
        dense_time = seconds;
      } else {
        ft::model::QuantizedWeight qw(w32.to(device), q);
        mb = qw->bytes() / 1e6;
        err = ft::model::round_trip_error(w32, *qw).relative_rms;
        seconds = seconds_per_call(steps, device, [&] {
          auto y = ft::model::quantized_linear(x, qw);
          y.backward(upstream);
        });
        dequant = seconds_per_call(steps, device, [&] { qw->dequantize(dtype); });
      }
      x.mutable_grad().reset();
      std::printf("%-10s %5lldx%-5lld %-6s %9.1f %9.1f %9.1f %7.2fx %10.1f %9.4f\n", name, (long long)out,
                  (long long)in, ft::model::quantization_name(q) == "none" ? c10::toString(dtype)
                                                                           : ft::model::quantization_name(q).c_str(),
                  mb, seconds * 1e3, dequant * 1e3, seconds / dense_time, flops / seconds / 1e9, err);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ft::app::run_main("bench_quantized_linear", argc, argv, run); }
