#include "checkpoint/resume.h"

#include <set>

#include "checkpoint/checkpoint_folder.h"
#include "comm/rendezvous.h"
#include "util/error.h"

namespace ft::checkpoint {

std::optional<std::string> checkpoint_to_resume(const config::RunConfig& c, const std::string& resume_path) {
  if (!resume_path.empty()) return resume_path;
  if (c.checkpoint.resume != config::ResumeMode::kAuto) return std::nullopt;
  return latest_checkpoint(c.run_dir);
}

bool key_changes_math(const std::string& key) {
  static const std::set<std::string> neutral = {
      "run_dir",          "data.eval",          "data.cache_dir",       "data.prefetch",
      "data.num_workers", "data.max_bad_records", "train.micro_batch_size", "train.threads",
      "train.activation_checkpointing", "train.offload_activations", "train.offload_prefetch",
      "train.on_nonfinite", "model.attention"};
  static const std::vector<std::string> neutral_sections = {"parallel.", "checkpoint.", "log."};
  if (neutral.count(key) != 0) return false;
  for (const std::string& section : neutral_sections)
    if (key.compare(0, section.size(), section) == 0) return false;
  return true;
}

std::vector<std::string> math_differences(const Json& saved, const Json& current) {
  std::vector<std::string> out;
  for (const comm::ConfigDifference& d : comm::config_differences(saved, current))
    if (key_changes_math(d.key)) out.push_back(d.key + ": " + d.here + " -> " + d.there);
  return out;
}

}  // namespace ft::checkpoint
