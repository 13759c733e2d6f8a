// Saving a checkpoint, collectively and atomically (checkpoint_folder.h has the folder's rules):
//   1. rank 0 creates checkpoints/step_N.tmp;
//   2. every rank writes rank_R.safetensors (its optimizer shard: fp32 master weights and AdamW
//      moments; with replicated state (DDP), its 1/W of it; its RNG state) and rank_R.json
//      (the shard's pieces, the file's size and CRC-32), each fsynced;
//   3. the weights users read: rank 0 writes adapter/ (PEFT) or model/ (HF), gathered
//      collectively; and training_state.json and config.json;
//   4. once every rank reports success, rank 0 writes manifest.json, renames the folder to
//      step_N, points `latest` at it, and deletes checkpoints beyond checkpoint.keep_last.
// Every rank takes the same collectives whatever fails, so nobody waits on one that another
// skipped; a failure anywhere (a full disk) is an error on every rank and leaves the previous
// checkpoint and `latest` as they were. A process killed at any moment leaves at worst a .tmp
// folder, removed at the next start.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <string>

#include "checkpoint/host_staging.h"
#include "checkpoint/manifest.h"
#include "checkpoint/training_state.h"
#include "io/safetensors.h"
#include "comm/communicator.h"
#include "parallel/parallel_strategy.h"
#include "util/json.h"

namespace ft::checkpoint {

// Writes the trained weights into a folder (rank 0; a no-op on the others).
using WeightsWriter = std::function<void(const std::string& dir)>;

struct SaveRequest {
  std::string run_dir;
  std::int64_t keep_last = 2;
  Json resolved_config;  // written as config.json, compared at resume
  TrainingState state;
  c10::Device device = c10::kCPU;
  // Collective: every rank calls it; rank 0 writes the trained weights into the given folder.
  // It must complete the strategy's collectives even when rank 0's writing fails (and then throw).
  std::function<void(const std::string& dir)> write_weights;
  // Collective, for a save in the background (async_checkpointer.h): the strategy gathers the
  // weights and rank 0 keeps host copies (in the staging buffers); the writer it returns writes
  // them later, on its own.
  std::function<WeightsWriter(HostStaging& staging)> snapshot_weights;
};

struct SaveReport {
  std::string path;        // the complete checkpoint
  double seconds = 0;      // the whole save, as training was blocked by it
  std::uint64_t bytes = 0;  // all files (rank 0's count)
};

SaveReport save_checkpoint(const SaveRequest& request, comm::Communicator& comm, parallel::ParallelStrategy& strategy);

// The stages of a save, for the synchronous save above and the background one.

// This rank's part of the optimizer state (fp32 master weights and AdamW moments: its shard, or
// its 1/W of replicated state) and its RNG state, with the index entry the manifest takes.
struct RankFiles {
  io::NamedTensors tensors;
  RankShard shard;
};
// `staging`: host copies (pinned when the state is on a GPU) that training may not touch; none:
// views of the live state, to be written before training goes on.
RankFiles rank_files(parallel::ParallelStrategy& strategy, comm::Communicator& comm, c10::Device device,
                     HostStaging* staging);
// rank_R.safetensors and rank_R.json in `tmp`, each fsynced.
void write_rank_files(const std::string& tmp, const RankFiles& files);
// training_state.json and config.json (rank 0).
void write_run_files(const std::string& tmp, const TrainingState& state, const Json& resolved_config);
// Rank 0, once every rank's files are in `tmp` (step_N.tmp): manifest.json, the rename to
// step_N, `latest`, and the checkpoints beyond keep_last deleted. Returns the bytes of all files.
std::uint64_t complete_checkpoint(const std::string& run_dir, std::int64_t step, int world_size,
                                  const std::string& strategy_name, const Json& resolved_config, std::int64_t keep_last);

// "rank_00003.safetensors" / "rank_00003.json".
std::string rank_shard_file(int rank);
std::string rank_index_file(int rank);

}  // namespace ft::checkpoint
