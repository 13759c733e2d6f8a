// ft_bench: how fast does a config train, and how well does it scale? Short training bursts of
// the config on each world size (real ranks through ft_launch), then tokens/s, scaling
// efficiency against the smallest world size, the step-time split, achieved FLOP/s and MFU
// against a matrix-product peak measured here, into OUT/bench.json and a chart OUT/bench.png.
//   ft_bench configs/tiny_lora.json --ranks 1,2 --steps 10
//   ft_bench configs/llama7b_zero2.json --ranks 1,2,4,8 --steps 20 --out runs/bench_7b
#include <unistd.h>

#include <cxxopts.hpp>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <thread>

#include <torch/cuda.h>

#include "app_main.h"
#include "bench/matmul_peak.h"
#include "bench/scaling_bench.h"
#include "bench/training_flops.h"
#include "config_args.h"
#include "io/dtype.h"
#include "io/hf_config.h"
#include "plan/memory_plan.h"
#include "util/error.h"
#include "util/file_util.h"
#include "util/json.h"
#include "util/log.h"

namespace {

namespace fs = std::filesystem;

// ft_launch and ft_train live next to this program.
std::string sibling_program(const std::string& name) {
  const fs::path self = fs::read_symlink("/proc/self/exe");
  const fs::path path = self.parent_path() / name;
  FT_CHECK(fs::exists(path), name, " not found next to ft_bench (", path.string(), ")");
  return path.string();
}

// The interpreter for the chart: FT_PYTHON, else Debian's (where setup.sh installs matplotlib).
std::string python() {
  if (const char* p = std::getenv("FT_PYTHON")) return p;
  return fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
}

ft::Json to_json(const ft::bench::BurstResult& r) {
  return {{"ranks", r.ranks},
          {"steps", r.steps},
          {"tokens_per_s", r.tokens_per_s},
          {"scaling_efficiency", r.scaling_efficiency},
          {"time", {{"step", r.step_s}, {"data_wait", r.data_wait_s}, {"compute", r.compute_s},
                    {"communication", r.communication_s}, {"optimizer", r.optimizer_s}}},
          {"achieved_flops_per_s", r.achieved_flops_per_s},
          {"mfu", r.mfu},
          {"peak_memory_bytes", r.peak_memory_bytes},
          {"run_dir", r.run_dir}};
}

int run(int argc, char** argv) {
  cxxopts::Options options("ft_bench", "Training throughput and scaling of a config over world sizes.");
  ft::app::add_config_options(options);
  options.add_options()
      ("ranks", "world sizes to run, increasing", cxxopts::value<std::string>()->default_value("1,2"))
      ("steps", "measured steps per world size", cxxopts::value<std::int64_t>()->default_value("10"))
      ("warmup", "steps run first and not measured", cxxopts::value<std::int64_t>()->default_value("2"))
      ("out", "folder for the runs, bench.json and bench.png (default runs/bench_<config>)", cxxopts::value<std::string>())
      ("no-chart", "write bench.json only")
      ("h,help", "show this help");
  auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::cout << options.help() << std::endl;
    return 0;
  }
  const std::int64_t steps = args["steps"].as<std::int64_t>(), warmup = args["warmup"].as<std::int64_t>();
  if (steps <= 0) throw ft::app::UsageError{"--steps must be positive"};
  if (warmup < 0) throw ft::app::UsageError{"--warmup must not be negative"};
  std::vector<int> ranks;
  try {
    ranks = ft::bench::parse_rank_list(args["ranks"].as<std::string>());
  } catch (const ft::Error& e) {
    throw ft::app::UsageError{e.what()};
  }
  const ft::config::RunConfig config = ft::app::load_config_from_args(args);
  const std::string config_path = args["config"].as<std::string>();
  const std::string out = args.count("out") ? args["out"].as<std::string>()
                                            : "runs/bench_" + fs::path(config_path).stem().string();
  ft::make_directories(out);

  // What one token costs, and what this machine's devices can do.
  const ft::io::LlamaConfig model = ft::io::load_llama_config(config.model.path);
  const std::int64_t lora_parameters =
      config.lora ? ft::plan::plan_memory(config, model, ft::plan::PlanOptions{}).lora_parameters : 0;
  const double flops_per_token = ft::bench::training_flops_per_token(model, config.data.max_seq_len, lora_parameters);
  const bool cuda = torch::cuda::is_available() && config.parallel.backend != ft::config::Backend::kGloo;
  const c10::Device device = cuda ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  const auto dtype = ft::io::scalar_type(config.train.precision);
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const ft::bench::MatmulPeak peak = ft::bench::measure_matmul_peak(device, dtype, threads);
  const std::string peak_note =
      cuda ? ft::str(ft::config::choice_name(config.train.precision), " ", peak.n, "x", peak.n, " matrix products on one GPU, x ranks")
           : ft::str(ft::config::choice_name(config.train.precision), " ", peak.n, "x", peak.n, " matrix products with all ", threads,
                     " CPU threads (the ranks share this CPU)");
  std::printf("ft_bench: %s, %.3g FLOPs per token (%s), peak %.1f GFLOP/s measured (%s)\n", config_path.c_str(),
              flops_per_token, config.lora ? "LoRA: 4N + 6N_lora + 12LHQT" : "6N + 12LHQT", peak.flops_per_s / 1e9,
              peak_note.c_str());

  ft::bench::BurstCommand command;
  command.ft_launch = sibling_program("ft_launch");
  command.ft_train = sibling_program("ft_train");
  command.config = config_path;
  command.overrides = ft::app::set_overrides(args);
  command.steps = steps;
  command.warmup = warmup;
  std::vector<ft::bench::BurstResult> results;
  for (int w : ranks) {
    std::printf("ft_bench: %d rank%s, %lld + %lld steps ...\n", w, w == 1 ? "" : "s", (long long)warmup, (long long)steps);
    std::fflush(stdout);
    results.push_back(ft::bench::run_burst(command, w, ft::join_path(out, "ranks_" + std::to_string(w))));
  }
  ft::bench::add_rates(results, flops_per_token, peak.flops_per_s, !cuda);

  std::printf("\n%5s %11s %10s %9s %9s %9s %9s %9s %12s %7s %10s\n", "ranks", "tokens/s", "efficiency", "step s",
              "data s", "compute s", "comm s", "optim s", "GFLOP/s", "MFU", "peak MB");
  for (const auto& r : results)
    std::printf("%5d %11.0f %9.1f%% %9.4f %9.4f %9.4f %9.4f %9.4f %12.2f %6.1f%% %10.1f\n", r.ranks, r.tokens_per_s,
                100 * r.scaling_efficiency, r.step_s, r.data_wait_s, r.compute_s, r.communication_s, r.optimizer_s,
                r.achieved_flops_per_s / 1e9, 100 * r.mfu, r.peak_memory_bytes / 1e6);
  std::printf("efficiency: tokens/s per rank against %d rank%s; MFU against %.1f GFLOP/s per %s\n",
              results.front().ranks, results.front().ranks == 1 ? "" : "s", peak.flops_per_s / 1e9,
              cuda ? "GPU" : "CPU (all ranks share it)");

  ft::Json rows = ft::Json::array();
  for (const auto& r : results) rows.push_back(to_json(r));
  const ft::Json report = {{"config", config_path},
                           {"steps", steps},
                           {"warmup", warmup},
                           {"device", cuda ? "cuda" : "cpu"},
                           {"precision", ft::config::choice_name(config.train.precision)},
                           {"flops_per_token", flops_per_token},
                           {"peak_flops_per_s", peak.flops_per_s},
                           {"peak_note", peak_note},
                           {"results", rows}};
  const std::string json_path = ft::join_path(out, "bench.json");
  ft::write_file_atomic(json_path, report.dump(2) + "\n");
  std::printf("wrote %s\n", json_path.c_str());
  if (!args.count("no-chart")) {
    const std::string png = ft::join_path(out, "bench.png");
    const std::string script = ft::join_path(FT_SCRIPTS_DIR, "plot_bench.py");
    std::fflush(stdout);
    bool drawn = false;
    try {
      drawn = ft::bench::run_program({python(), script, json_path, "-o", png}) == 0;
    } catch (const ft::Error& e) {  // no interpreter: the numbers are written, the chart is not
      ft::log::warn(e.what());
    }
    if (!drawn)
      ft::log::warn("the chart was not drawn (", python(), " ", script, " failed; it needs matplotlib: apt-get install "
                    "python3-matplotlib)");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ft::app::run_main("ft_bench", argc, argv, run); }
