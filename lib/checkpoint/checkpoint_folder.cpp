#include "checkpoint/checkpoint_folder.h"

#include <algorithm>
#include <cstdio>

#include "util/error.h"
#include "util/file_util.h"

namespace ft::checkpoint {
namespace {
constexpr const char* kLatestFile = "latest";
constexpr const char* kPrefix = "step_";
}  // namespace

std::string checkpoints_dir(const std::string& run_dir) { return join_path(run_dir, "checkpoints"); }

std::string step_name(std::int64_t step) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%s%06lld", kPrefix, static_cast<long long>(step));
  return buffer;
}

std::optional<std::int64_t> step_of(const std::string& name) {
  const std::string prefix = kPrefix;
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  const std::string digits = name.substr(prefix.size());
  if (digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  return std::stoll(digits);
}

std::vector<std::string> complete_checkpoints(const std::string& run_dir) {
  const std::string dir = checkpoints_dir(run_dir);
  std::vector<std::pair<std::int64_t, std::string>> found;
  for (const std::string& name : list_directory(dir)) {
    const auto step = step_of(name);
    const std::string path = join_path(dir, name);
    if (step && file_exists(join_path(path, kManifestFile))) found.emplace_back(*step, path);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> paths;
  for (auto& [step, path] : found) paths.push_back(path);
  return paths;
}

std::optional<std::string> latest_checkpoint(const std::string& run_dir) {
  const std::string dir = checkpoints_dir(run_dir);
  const std::string latest = join_path(dir, kLatestFile);
  if (!file_exists(latest)) {
    const std::vector<std::string> complete = complete_checkpoints(run_dir);
    if (complete.empty()) return std::nullopt;
    return complete.back();
  }
  std::string name = read_file(latest);
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r' || name.back() == ' ')) name.pop_back();
  FT_CHECK(step_of(name).has_value(), latest, ": expected a checkpoint folder name like step_000500, found \"", name,
           "\"");
  const std::string path = join_path(dir, name);
  if (!file_exists(join_path(path, kManifestFile))) {
    std::string complete;
    for (const auto& p : complete_checkpoints(run_dir)) complete += "\n  " + p;
    FT_CHECK(false, latest, " names ", name, ", which is missing or has no ", kManifestFile,
             complete.empty() ? std::string(" (there is no complete checkpoint)")
                              : "; complete checkpoints (pass one with --resume):" + complete);
  }
  return path;
}

void point_latest_at(const std::string& run_dir, const std::string& name) {
  write_file_atomic(join_path(checkpoints_dir(run_dir), kLatestFile), name + "\n");
}

std::vector<std::string> remove_unfinished(const std::string& run_dir) {
  const std::string dir = checkpoints_dir(run_dir);
  std::vector<std::string> removed;
  for (const std::string& name : list_directory(dir)) {
    if (name.size() < 4 || name.compare(name.size() - 4, 4, ".tmp") != 0) continue;
    if (!step_of(name.substr(0, name.size() - 4))) continue;
    const std::string path = join_path(dir, name);
    remove_tree(path);
    removed.push_back(path);
  }
  return removed;
}

std::vector<std::string> prune_checkpoints(const std::string& run_dir, std::int64_t keep_last, const std::string& keep) {
  std::vector<std::string> complete = complete_checkpoints(run_dir);
  std::vector<std::string> removed;
  std::int64_t excess = static_cast<std::int64_t>(complete.size()) - keep_last;
  for (const std::string& path : complete) {
    if (excess <= 0) break;
    if (path == keep) continue;
    // The manifest goes first: a crash halfway through leaves an incomplete folder that no
    // resume will mistake for a checkpoint.
    std::remove(join_path(path, kManifestFile).c_str());
    remove_tree(path);
    removed.push_back(path);
    --excess;
  }
  return removed;
}

}  // namespace ft::checkpoint
