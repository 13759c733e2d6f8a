#include "test_support.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace ft::test {

namespace {
// The folders compiled in, unless the environment names others: binaries built on one machine and
// run on another (scripts/gpu_check.sh --prebuilt) find the checkout and the programs there.
std::string folder(const char* variable, const char* compiled) {
  const char* set = std::getenv(variable);
  return set != nullptr && *set != '\0' ? set : compiled;
}
}  // namespace

std::string data_path(const std::string& relative) {
  return folder("FT_TEST_DATA_DIR", FT_TEST_DATA_DIR) + "/" + relative;
}
std::string model_config_path(const std::string& hf_name) {
  return data_path("../../configs/models/" + hf_name);
}
std::string bin_path(const std::string& program) { return folder("FT_BIN_DIR", FT_BIN_DIR) + "/" + program; }

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "ft_test_XXXXXX").string();
  char* made = ::mkdtemp(pattern.data());
  if (made == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = made;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

torch::Tensor tensor_from_json(const Json& j) {
  std::vector<float> values = j.at("values").get<std::vector<float>>();
  std::vector<std::int64_t> shape = j.at("shape").get<std::vector<std::int64_t>>();
  return torch::tensor(values, torch::kFloat).reshape(shape);
}

CommandResult run_command(const std::string& command, bool capture_stderr) {
  CommandResult result;
  std::string full = command + (capture_stderr ? " 2>&1" : "");
  FILE* pipe = ::popen(full.c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  std::size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
  int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  // Under the sanitizers (scripts/sanitize.sh) a report from a child fails the test even when the
  // child was meant to fail: its exit code alone would hide it.
  for (const char* marker : {"runtime error: ", "ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "WARNING: ThreadSanitizer"})
    if (result.output.find(marker) != std::string::npos)
      ADD_FAILURE() << "sanitizer report in the output of: " << command << "\n" << result.output;
  return result;
}

std::string ft_train_command(int ranks, const std::string& config_path, const std::string& args) {
  std::string cmd = bin_path("ft_train") + " " + config_path + (args.empty() ? "" : " " + args);
  if (ranks > 1) cmd = bin_path("ft_launch") + " --nproc_per_node " + std::to_string(ranks) + " " + cmd;
  return cmd;
}

std::vector<Json> read_metrics(const std::string& run_dir) {
  std::vector<Json> out;
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) out.push_back(parse_json(line, run_dir + "/metrics.jsonl"));
  return out;
}

std::vector<double> metric_losses(const std::vector<Json>& metrics) {
  std::vector<double> out;
  for (const Json& m : metrics)
    if (m.contains("loss")) out.push_back(m["loss"].get<double>());
  return out;
}

double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

}  // namespace ft::test
