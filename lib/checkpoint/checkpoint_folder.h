// Where checkpoints live in a run folder and how the folder is kept consistent:
//   RUN_DIR/checkpoints/step_000500/       a complete checkpoint (it has manifest.json)
//   RUN_DIR/checkpoints/step_000600.tmp/   a save in progress, or one a crash interrupted
//   RUN_DIR/checkpoints/latest             "step_000500\n": the newest complete checkpoint
// A save writes into the .tmp folder and renames it when complete; `latest` is replaced by an
// atomic rename after that, so at every instant it names a complete checkpoint. Only rank 0
// changes this folder's entries.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ft::checkpoint {

constexpr const char* kManifestFile = "manifest.json";

std::string checkpoints_dir(const std::string& run_dir);
std::string step_name(std::int64_t step);  // "step_000500"
// The step a checkpoint folder name stands for (step_000500 -> 500), or nullopt for other names.
std::optional<std::int64_t> step_of(const std::string& name);

// The folder `latest` names; without a `latest` file, the newest complete checkpoint (a crash
// between renaming a checkpoint into place and pointing `latest` at it); nullopt when there is
// none. Throws ft::Error when `latest` is malformed or names a folder without a manifest
// (listing the complete ones).
std::optional<std::string> latest_checkpoint(const std::string& run_dir);
// Atomically makes `latest` name `name` (a folder in checkpoints/).
void point_latest_at(const std::string& run_dir, const std::string& name);

// Complete checkpoints (folders step_N with a manifest), by step, oldest first (full paths).
std::vector<std::string> complete_checkpoints(const std::string& run_dir);
// Removes step_*.tmp folders that a save left behind when its process died; returns them.
std::vector<std::string> remove_unfinished(const std::string& run_dir);
// Deletes the oldest complete checkpoints until keep_last remain; never `keep` (a full path).
std::vector<std::string> prune_checkpoints(const std::string& run_dir, std::int64_t keep_last, const std::string& keep);

}  // namespace ft::checkpoint
