#include "checkpoint/async_checkpointer.h"

#include <torch/torch.h>

#include "checkpoint/checkpoint_folder.h"
#include "checkpoint/save_agreement.h"
#include "util/error.h"
#include "util/fault_point.h"
#include "util/file_util.h"
#include "util/log.h"
#include "util/timer.h"

namespace ft::checkpoint {

struct AsyncCheckpointer::Save {
  bool root = false;
  std::string run_dir, tmp, final_path, strategy_name;
  std::int64_t step = 0, keep_last = 2;
  int world_size = 1;
  Json resolved_config;
  TrainingState state;
  RankFiles files;        // this rank's snapshot, until written
  WeightsWriter weights;  // rank 0's gathered weights, until written
  Stopwatch clock;        // from start()
  std::thread thread;
  // Set by the thread when it is done, after `outcome` and `bytes` (release; read with acquire).
  std::atomic<bool> written{false};
  std::atomic<bool> completed{false};
  Attempt outcome;  // the writing's and the completion's first error
  std::uint64_t bytes = 0;
  bool reported = false;

  std::string what() const { return str("checkpoint ", final_path); }
  void join() {
    if (thread.joinable()) thread.join();
  }

  // The writer thread, first part: this rank's files (rank 0: also the weights and run files).
  void write() {
    outcome([&] {
      write_rank_files(tmp, files);
      files = RankFiles{};  // the host copy is no longer needed
      fault_point("checkpoint.rank_files_written");
      if (root) {
        weights(tmp);
        weights = nullptr;
        write_run_files(tmp, state, resolved_config);
      }
      fault_point("checkpoint.files_written");
    });
    written.store(true, std::memory_order_release);
  }

  // Rank 0's writer thread, once every rank's files are there: the checkpoint made complete.
  void complete() {
    outcome([&] { bytes = complete_checkpoint(run_dir, step, world_size, strategy_name, resolved_config, keep_last); });
    completed.store(true, std::memory_order_release);
  }
};

AsyncCheckpointer::AsyncCheckpointer(comm::Communicator& comm) : comm_(comm) {}

AsyncCheckpointer::~AsyncCheckpointer() {
  if (save_) save_->join();
}

double AsyncCheckpointer::start(const SaveRequest& request, parallel::ParallelStrategy& strategy) {
  Stopwatch held;
  finish();  // at most one save in flight
  auto save = std::make_unique<Save>();
  Save& s = *save;
  s.root = comm_.is_root();
  s.run_dir = request.run_dir;
  s.step = request.state.step;
  s.keep_last = request.keep_last;
  s.world_size = comm_.world_size();
  s.strategy_name = strategy.name();
  s.resolved_config = request.resolved_config;
  s.state = request.state;
  s.final_path = join_path(checkpoints_dir(request.run_dir), step_name(request.state.step));
  s.tmp = s.final_path + ".tmp";
  auto cleanup = [&] { remove_tree(s.tmp); };

  Attempt attempt;
  if (s.root) attempt([&] {
    remove_tree(s.tmp);
    make_directories(s.tmp);
  });
  agree(comm_, attempt, s.what(), cleanup);
  fault_point("checkpoint.started");
  // The snapshot: host copies of this rank's state; the weights gathered (collective, so every
  // rank takes part whatever failed above). Out of host memory here fails the save everywhere.
  attempt([&] { s.files = rank_files(strategy, comm_, request.device, &staging_); });
  try {
    s.weights = request.snapshot_weights(staging_);
  } catch (const std::exception& e) {
    attempt.fail(e.what());
  }
  agree(comm_, attempt, s.what(), cleanup);
  s.thread = std::thread([&s] { s.write(); });
  save_ = std::move(save);
  phase_ = Phase::kWriting;
  return held.seconds();
}

void AsyncCheckpointer::poll() {
  if (phase_ == Phase::kCompleting) log_completed();
  if (phase_ != Phase::kWriting) return;
  const bool written = save_->written.load(std::memory_order_acquire);
  const double writing = comm::all_reduce_scalar(comm_, written ? 0.0 : 1.0, comm::ReduceOp::kSum);
  if (writing == 0) agree_written();
}

// Collective, once every rank's writer is done: did any fail? Then rank 0 completes it.
void AsyncCheckpointer::agree_written() {
  save_->join();
  try {
    const std::string tmp = save_->tmp;
    agree(comm_, save_->outcome, save_->what(), [&] { remove_tree(tmp); });
  } catch (...) {
    save_.reset();
    phase_ = Phase::kIdle;
    throw;
  }
  phase_ = Phase::kCompleting;
  if (save_->root) {
    Save* s = save_.get();
    s->thread = std::thread([s] { s->complete(); });
  } else {
    save_->completed.store(true, std::memory_order_release);
  }
}

void AsyncCheckpointer::log_completed() {
  Save& s = *save_;
  if (!s.root || s.reported || !s.completed.load(std::memory_order_acquire) || !s.outcome.error().empty()) return;
  s.reported = true;
  log::info("checkpoint ", s.final_path, " complete, ", s.clock.seconds(), " s after the save began (", s.bytes / 1e6,
            " MB written in the background)");
}

void AsyncCheckpointer::finish() {
  if (phase_ == Phase::kIdle) return;
  if (phase_ == Phase::kWriting) agree_written();  // waits for this rank's writer first
  save_->join();  // rank 0: the completion
  log_completed();
  const std::unique_ptr<Save> done = std::move(save_);
  phase_ = Phase::kIdle;
  agree(comm_, done->outcome, done->what(), [&] { remove_tree(done->tmp); });
}

}  // namespace ft::checkpoint
