#include "checkpoint/resume.h"

#include <set>

#include "checkpoint/checkpoint_folder.h"
#include "util/error.h"

namespace ft::checkpoint {
namespace {

void flatten(const Json& j, const std::string& prefix, std::map<std::string, Json>* out) {
  if (j.is_object() && !j.empty()) {
    for (auto it = j.begin(); it != j.end(); ++it) flatten(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key(), out);
  } else {
    (*out)[prefix] = j;
  }
}

}  // namespace

std::optional<std::string> checkpoint_to_resume(const config::RunConfig& c, const std::string& resume_path) {
  if (!resume_path.empty()) return resume_path;
  if (c.checkpoint.resume != "auto") return std::nullopt;
  return latest_checkpoint(c.run_dir);
}

bool key_changes_math(const std::string& key) {
  static const std::set<std::string> neutral = {
      "run_dir",          "data.eval",          "data.cache_dir",       "data.prefetch",
      "data.num_workers", "data.max_bad_records", "train.micro_batch_size", "train.threads",
      "train.activation_checkpointing", "train.on_nonfinite"};
  static const std::vector<std::string> neutral_sections = {"parallel.", "checkpoint.", "log."};
  if (neutral.count(key) != 0) return false;
  for (const std::string& section : neutral_sections)
    if (key.compare(0, section.size(), section) == 0) return false;
  return true;
}

std::vector<std::string> math_differences(const Json& saved, const Json& current) {
  std::map<std::string, Json> a, b;
  flatten(saved, "", &a);
  flatten(current, "", &b);
  std::set<std::string> keys;
  for (const auto& [k, v] : a) keys.insert(k);
  for (const auto& [k, v] : b) keys.insert(k);
  std::vector<std::string> out;
  for (const std::string& k : keys) {
    if (!key_changes_math(k)) continue;
    const auto x = a.find(k), y = b.find(k);
    const std::string before = x == a.end() ? "(absent)" : x->second.dump();
    const std::string after = y == b.end() ? "(absent)" : y->second.dump();
    if (before != after) out.push_back(k + ": " + before + " -> " + after);
  }
  return out;
}

}  // namespace ft::checkpoint
