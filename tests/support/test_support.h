// Helpers shared by the test suites: paths into tests/data, temporary folders, JSON reference
// tensors, and an assertion that a statement throws ft::Error with a given message fragment.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <torch/torch.h>

#include "launch/free_port.h"
#include "util/error.h"
#include "util/json.h"

namespace ft::test {

// tests/data/<relative> ($FT_TEST_DATA_DIR when set)
std::string data_path(const std::string& relative);
// The bundled config.json folder of a model by its Hugging Face name: configs/models/ORG/NAME.
std::string model_config_path(const std::string& hf_name);
// build/bin/<program> ($FT_BIN_DIR when set)
std::string bin_path(const std::string& program);

// A fresh directory under $TMPDIR, removed with everything in it when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// {"shape": [...], "values": [...]} -> fp32 tensor.
torch::Tensor tensor_from_json(const Json& j);

// Runs a shell command, returns its exit code and captures stdout (and stderr when asked).
struct CommandResult {
  int exit_code = -1;
  std::string output;
};
CommandResult run_command(const std::string& command, bool capture_stderr = false);

// The shell command that runs ft_train on `ranks` ranks (through ft_launch when ranks > 1) with
// `args` after the config path.
std::string ft_train_command(int ranks, const std::string& config_path, const std::string& args = "");
// RUN_DIR/metrics.jsonl, one JSON object per line.
std::vector<Json> read_metrics(const std::string& run_dir);
// The "loss" of each training record, in order.
std::vector<double> metric_losses(const std::vector<Json>& metrics);

// Max |a - b| (as double).
double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b);

// A TCP port nothing listens on right now; with `keep`, its socket stays open and listening (a
// port in use, for tests of that case) and *keep is the descriptor to close.
using launch::free_port;

}  // namespace ft::test

// EXPECT_FT_ERROR(statement, "fragment"): the statement throws ft::Error whose message contains
// the fragment.
#define EXPECT_FT_ERROR(statement, fragment)                                                   \
  do {                                                                                         \
    bool ft_thrown_ = false;                                                                   \
    try {                                                                                      \
      statement;                                                                               \
    } catch (const ::ft::Error& e) {                                                           \
      ft_thrown_ = true;                                                                       \
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)                       \
          << "message: " << e.what() << "\nexpected to contain: " << (fragment);               \
    }                                                                                          \
    EXPECT_TRUE(ft_thrown_) << #statement << " did not throw ft::Error";                        \
  } while (0)
