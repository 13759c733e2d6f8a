// ft_bench: short training bursts of one config on several world sizes (real ft_train ranks
// started by ft_launch, as a user runs them), each summarized from its metrics.jsonl: tokens/s,
// the step-time split, achieved FLOP/s and MFU against a measured matrix-product peak, and the
// scaling efficiency against the smallest world size. The global batch stays the config's, so
// more ranks means fewer accumulation steps per rank (strong scaling).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/json.h"

namespace ft::bench {

struct BurstResult {
  int ranks = 0;
  std::int64_t steps = 0;              // measured steps (after the warm-up ones)
  double tokens_per_s = 0;             // all ranks together
  double step_s = 0;                   // mean over the measured steps, rank 0's clock
  double data_wait_s = 0, compute_s = 0, communication_s = 0, optimizer_s = 0;
  std::int64_t peak_memory_bytes = 0;  // the largest rank's
  double achieved_flops_per_s = 0;     // tokens/s x model FLOPs per token
  double mfu = 0;                      // achieved / (peak per device x devices)
  double scaling_efficiency = 0;       // tokens/s per rank against the smallest world size's
  std::string run_dir;
};

// The measured part of one burst: the training records of metrics.jsonl after `warmup` steps.
// `source` names the file in errors.
BurstResult summarize_burst(const std::vector<Json>& records, std::int64_t warmup, const std::string& source);

// Fills achieved FLOP/s, MFU and scaling efficiency. `peak_per_device`: the measured rate of one
// device; `devices_per_rank` 1 on GPUs (one each), 0 on the CPU (the ranks share one CPU, whose
// peak was measured with all its threads).
void add_rates(std::vector<BurstResult>& results, double flops_per_token, double peak_per_device, bool shared_device);

struct BurstCommand {
  std::string ft_launch, ft_train, config;
  std::vector<std::string> overrides;  // --set key=value, after the bench's own
  std::int64_t steps = 10, warmup = 2;
};

// Runs one burst on `ranks` ranks into `run_dir` (emptied first; it must be new or a run folder),
// ft_launch's output into run_dir/bench.log. Throws with the log's tail when the run fails.
BurstResult run_burst(const BurstCommand& command, int ranks, const std::string& run_dir);

// Runs `argv` (argv[0] searched on PATH unless it has a slash) and returns its exit status (128 +
// signal when killed); stdout and stderr go into the file `log`, or stay this process's when empty.
int run_program(const std::vector<std::string>& argv, const std::string& log = "");

// "1,2,4" -> {1, 2, 4}: positive, increasing.
std::vector<int> parse_rank_list(const std::string& text);

}  // namespace ft::bench
