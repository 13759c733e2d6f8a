// Checkpoints saved in the background (checkpoint.async): training is held only while each rank
// copies its shard and RNG state to host memory (pinned on a GPU) and the strategy gathers the
// weights (rank 0 keeps host copies); a writer thread on each rank then writes the files while
// training goes on, with the same atomic protocol as the synchronous save (checkpoint_writer.h):
//   start()  collective: rank 0 makes step_N.tmp; the copies; the writers start
//            ("checkpoint.started");
//   writer   rank_R.safetensors + rank_R.json ("checkpoint.rank_files_written"); rank 0 also the
//            weights, training_state.json and config.json ("checkpoint.files_written");
//   poll()   collective, at every step boundary while a save is in flight: one all-reduce of
//            "still writing"; once no rank is, and none failed, rank 0's writer completes the
//            checkpoint: manifest, rename to step_N, `latest` ("checkpoint.manifest_written",
//            "checkpoint.renamed", "checkpoint.latest_written"), keep_last;
//   finish() collective: waits for the save in flight to be complete.
// At most one save is in flight: start() first finishes the one before. A process killed at any
// moment leaves at worst a .tmp folder (removed at the next start) and `latest` at the last
// complete checkpoint, since the manifest is written and `latest` moved only after every rank's
// files are. A rank whose writing failed fails the save on every rank at the next poll() (or the
// completion, at the next start() or finish()), as a synchronous save would.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "checkpoint/checkpoint_writer.h"
#include "checkpoint/host_staging.h"
#include "comm/communicator.h"
#include "parallel/parallel_strategy.h"

namespace ft::checkpoint {

class AsyncCheckpointer {
 public:
  explicit AsyncCheckpointer(comm::Communicator& comm);
  // Waits for the writer thread: files it was writing stay in the .tmp folder, never completed.
  ~AsyncCheckpointer();
  AsyncCheckpointer(const AsyncCheckpointer&) = delete;
  AsyncCheckpointer& operator=(const AsyncCheckpointer&) = delete;

  // Collective: finishes the save in flight, if any, then starts this one; returns the seconds
  // training was held up (the wait for the save before included).
  double start(const SaveRequest& request, parallel::ParallelStrategy& strategy);
  // Collective while a save is in flight (a no-op otherwise). Rank 0 logs a save that became
  // complete since the last call.
  void poll();
  // Collective: the save in flight, if any, complete (and logged by rank 0).
  void finish();

 private:
  enum class Phase { kIdle, kWriting, kCompleting };
  struct Save;  // the save in flight: its snapshot, thread and outcome

  void agree_written();
  void log_completed();

  comm::Communicator& comm_;
  HostStaging staging_;  // the snapshots' host memory, reused by every save
  Phase phase_ = Phase::kIdle;
  std::unique_ptr<Save> save_;
};

}  // namespace ft::checkpoint
