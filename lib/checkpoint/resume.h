// Whether and from where a run continues: `ft_train --resume PATH` names a checkpoint;
// otherwise checkpoint.resume "auto" continues from RUN_DIR/checkpoints/latest when there is one.
// A checkpoint saved with a config that differs in anything that changes the math is refused
// (the differing keys listed) unless --resume-force.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "util/json.h"

namespace ft::checkpoint {

// The checkpoint folder to resume from, or nullopt for a fresh start.
std::optional<std::string> checkpoint_to_resume(const config::RunConfig& config, const std::string& resume_path);

// The config keys that may differ between a checkpoint and the run resuming it: where the run
// folder is, how the work is spread (parallel.*, micro-batch size, threads, activation
// checkpointing), logging, evaluation data and checkpointing itself.
bool key_changes_math(const std::string& dotted_key);

// Dotted keys whose values differ between two resolved configs and change the math, each as
// "train.lr: 0.001 -> 0.002".
std::vector<std::string> math_differences(const Json& saved, const Json& current);

}  // namespace ft::checkpoint
