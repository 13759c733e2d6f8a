// Reading a checkpoint back. The manifest, training_state.json and config.json are checked when
// it is opened; each rank then fills its own optimizer shard from the saved shards, whatever
// world size and strategy saved them: the pieces of every saved shard say which elements of
// which parameter it holds, so a rank copies exactly the elements its own pieces ask for, from
// the files that have them (each checked against its size and CRC-32 before use).
#pragma once

#include <c10/core/Device.h>

#include <set>
#include <string>

#include "checkpoint/manifest.h"
#include "checkpoint/training_state.h"
#include "comm/communicator.h"
#include "parallel/parallel_strategy.h"
#include "util/json.h"

namespace ft::checkpoint {

class CheckpointReader {
 public:
  // Reads and checks manifest.json, training_state.json and config.json of a complete checkpoint
  // folder; throws ft::Error naming the file on anything missing, truncated or damaged.
  explicit CheckpointReader(std::string dir);

  const std::string& dir() const { return dir_; }
  const Manifest& manifest() const { return manifest_; }
  const TrainingState& state() const { return state_; }
  const Json& config() const { return config_; }  // the resolved config the run was saved with

  // Collective. This rank's master weights and AdamW state from the saved shards, then the
  // parameters from the masters (strategy.reload_parameters_from_master). An error on any rank
  // is an error on every rank.
  void load_optimizer_state(parallel::ParallelStrategy& strategy, comm::Communicator& comm) const;
  // Restores this rank's random generators when the checkpoint was saved on the same number of
  // ranks, and returns true; otherwise leaves them alone and returns false.
  bool restore_rng(int rank, int world_size, c10::Device device) const;

 private:
  // verify_file once per file.
  void verify(const std::string& relative) const;

  std::string dir_;
  mutable std::set<std::string> verified_;
  Manifest manifest_;
  TrainingState state_;
  Json config_;
};

}  // namespace ft::checkpoint
