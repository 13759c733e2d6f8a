#include "bench/scaling_bench.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "util/error.h"
#include "util/file_util.h"

extern char** environ;

namespace ft::bench {
namespace {

// The last `lines` lines of `text`.
std::string tail(const std::string& text, std::size_t lines) {
  std::size_t at = text.size();
  for (std::size_t n = 0; n <= lines; ++n) {
    const std::size_t newline = at == 0 ? std::string::npos : text.rfind('\n', at - 1);
    if (newline == std::string::npos) return text;
    at = newline;
  }
  return text.substr(at + 1);
}

}  // namespace

int run_program(const std::vector<std::string>& argv, const std::string& log) {
  FT_ASSERT(!argv.empty(), "run_program: a program to run");
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (!log.empty()) {
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
  }
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  FT_CHECK(rc == 0, "cannot start ", argv[0], ": ", std::strerror(rc));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) FT_CHECK(errno == EINTR, "waitpid: ", std::strerror(errno));
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::vector<int> parse_rank_list(const std::string& text) {
  std::vector<int> ranks;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t end = std::min(text.find(',', begin), text.size());
    const std::string item = text.substr(begin, end - begin);
    char* stop = nullptr;
    const long value = std::strtol(item.c_str(), &stop, 10);
    FT_CHECK(!item.empty() && *stop == '\0' && value > 0 && value <= 1024, "--ranks ", text,
             ": expected a comma-separated list of positive world sizes such as 1,2,4; \"", item, "\" is not one");
    FT_CHECK(ranks.empty() || value > ranks.back(), "--ranks ", text, ": list the world sizes in increasing order");
    ranks.push_back(static_cast<int>(value));
    begin = end + 1;
  }
  return ranks;
}

BurstResult summarize_burst(const std::vector<Json>& records, std::int64_t warmup, const std::string& source) {
  BurstResult r;
  double seconds = 0, tokens = 0;
  for (const Json& record : records) {
    if (!record.contains("loss") || !record.contains("time")) continue;  // evaluations, checkpoints
    for (const Json& peak : record.value("peak_memory_bytes", Json::array()))
      r.peak_memory_bytes = std::max(r.peak_memory_bytes, peak.get<std::int64_t>());
    if (record["step"].get<std::int64_t>() <= warmup) continue;
    const Json& time = record["time"];
    const double step = time["step"].get<double>();
    seconds += step;
    tokens += record["tokens_per_s"].get<double>() * step;
    r.data_wait_s += time["data_wait"].get<double>();
    r.compute_s += time["compute"].get<double>();
    r.communication_s += time["communication"].get<double>();
    r.optimizer_s += time["optimizer"].get<double>();
    ++r.steps;
  }
  FT_CHECK(r.steps > 0, source, ": no training step after the ", warmup,
           " warm-up steps was logged (the run needs log.every_steps 1 and more steps)");
  const double n = static_cast<double>(r.steps);
  r.step_s = seconds / n;
  r.data_wait_s /= n;
  r.compute_s /= n;
  r.communication_s /= n;
  r.optimizer_s /= n;
  r.tokens_per_s = tokens / seconds;
  return r;
}

void add_rates(std::vector<BurstResult>& results, double flops_per_token, double peak_per_device, bool shared_device) {
  if (results.empty()) return;
  const BurstResult& base = results.front();
  const double base_per_rank = base.tokens_per_s / base.ranks;
  for (BurstResult& r : results) {
    r.achieved_flops_per_s = r.tokens_per_s * flops_per_token;
    const double devices = shared_device ? 1.0 : static_cast<double>(r.ranks);
    r.mfu = r.achieved_flops_per_s / (peak_per_device * devices);
    r.scaling_efficiency = (r.tokens_per_s / r.ranks) / base_per_rank;
  }
}

BurstResult run_burst(const BurstCommand& c, int ranks, const std::string& run_dir) {
  if (file_exists(run_dir)) {
    FT_CHECK(file_exists(join_path(run_dir, "config.json")) && file_exists(join_path(run_dir, "bench.log")),
             run_dir, " exists and is not an earlier ft_bench run folder: choose another --out");
    std::filesystem::remove_all(run_dir);
  }
  make_directories(run_dir);
  const std::string log = join_path(run_dir, "bench.log");
  std::vector<std::string> argv = {c.ft_launch, "--nproc_per_node", std::to_string(ranks), c.ft_train, c.config};
  // Fresh, short, every step logged; no evaluation, no checkpoint and no model written (for a 13B
  // model those would take longer than the burst).
  const std::vector<std::string> bench_settings = {
      "run_dir=" + run_dir,   "train.max_steps=" + std::to_string(c.steps + c.warmup),
      "log.every_steps=1",    "log.eval_every_steps=0",
      "data.eval=",           "checkpoint.every_steps=0",
      "checkpoint.resume=none", "checkpoint.save_at_end=false"};
  for (const std::string& o : bench_settings) {
    argv.push_back("--set");
    argv.push_back(o);
  }
  for (const std::string& o : c.overrides) {
    argv.push_back("--set");
    argv.push_back(o);
  }
  const int status = run_program(argv, log);
  FT_CHECK(status == 0, "the burst on ", ranks, ranks == 1 ? " rank" : " ranks", " failed (exit ", status, "); the end of ",
           log, ":\n", tail(read_file(log), 15));
  std::vector<Json> records;
  const std::string metrics = join_path(run_dir, "metrics.jsonl");
  const std::string text = read_file(metrics);
  std::size_t begin = 0;
  for (std::size_t line = 1; begin < text.size(); ++line) {
    const std::size_t end = std::min(text.find('\n', begin), text.size());
    if (end > begin) records.push_back(parse_json(text.substr(begin, end - begin), str(metrics, ":", line)));
    begin = end + 1;
  }
  BurstResult r = summarize_burst(records, c.warmup, metrics);
  r.ranks = ranks;
  r.run_dir = run_dir;
  return r;
}

}  // namespace ft::bench
