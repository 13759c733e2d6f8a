#include "checkpoint/checkpoint_writer.h"

#include <torch/torch.h>

#include <cstdio>
#include <exception>

#include "checkpoint/checkpoint_folder.h"
#include "checkpoint/manifest.h"
#include "checkpoint/rng_state.h"
#include "checkpoint/save_agreement.h"
#include "config/run_config.h"
#include "io/safetensors.h"
#include "parallel/optimizer_shard.h"
#include "util/error.h"
#include "util/fault_point.h"
#include "util/file_util.h"
#include "util/log.h"
#include "util/timer.h"

namespace ft::checkpoint {
namespace {

// Every file under `dir`, relative to it, sorted.
void list_files(const std::string& dir, const std::string& prefix, std::vector<std::string>* out) {
  for (const std::string& name : list_directory(join_path(dir, prefix))) {
    const std::string relative = prefix.empty() ? name : prefix + "/" + name;
    if (is_directory(join_path(dir, relative))) {
      list_files(dir, relative, out);
    } else {
      out->push_back(relative);
    }
  }
}

}  // namespace

std::string rank_shard_file(int rank) {
  char buffer[48];
  std::snprintf(buffer, sizeof(buffer), "rank_%05d.safetensors", rank);
  return buffer;
}

std::string rank_index_file(int rank) {
  char buffer[48];
  std::snprintf(buffer, sizeof(buffer), "rank_%05d.json", rank);
  return buffer;
}

RankFiles rank_files(parallel::ParallelStrategy& strategy, comm::Communicator& comm, c10::Device device,
                     HostStaging* staging) {
  parallel::OptimizerShard& shard = strategy.optimizer_shard();
  const optim::AdamWState state = shard.optimizer().state();
  at::Tensor master = shard.master(), exp_avg = state.exp_avg, exp_avg_sq = state.exp_avg_sq;
  std::vector<parallel::ShardPiece> pieces = strategy.shard_pieces();
  const int rank = comm.rank();
  if (strategy.state_replicated()) {
    // Every rank holds the same state (DDP): each writes its 1/W of it, so the ranks share the
    // writing as they do for sharded strategies.
    const std::int64_t n = master.numel(), world = comm.world_size();
    const std::int64_t begin = n * rank / world, end = n * (rank + 1) / world;
    std::vector<parallel::ShardPiece> mine;
    for (const parallel::ShardPiece& p : pieces) {
      const std::int64_t from = std::max(begin, p.shard_offset), to = std::min(end, p.shard_offset + p.length);
      if (from < to) mine.push_back({p.name, p.param_offset + (from - p.shard_offset), to - from, from - begin});
    }
    pieces = std::move(mine);
    master = master.narrow(0, begin, end - begin);
    exp_avg = exp_avg.narrow(0, begin, end - begin);
    exp_avg_sq = exp_avg_sq.narrow(0, begin, end - begin);
  }
  RankFiles files;
  files.tensors = {{"master", master}, {"exp_avg", exp_avg}, {"exp_avg_sq", exp_avg_sq}};
  if (staging != nullptr) {
    for (auto& [name, t] : files.tensors) t = staging->copy("shard." + name, t);  // a snapshot training cannot change
  }
  for (auto& t : capture_rng(device)) files.tensors.push_back(std::move(t));
  files.shard = RankShard{rank, rank_shard_file(rank), master.numel(), std::move(pieces)};
  return files;
}

void write_rank_files(const std::string& tmp, const RankFiles& files) {
  io::write_safetensors(join_path(tmp, files.shard.file), files.tensors);
  const Json index = {{"file", describe_file(tmp, files.shard.file).to_json()}, {"shard", files.shard.to_json()}};
  write_file_atomic(join_path(tmp, rank_index_file(files.shard.rank)), index.dump() + "\n");
}

void write_run_files(const std::string& tmp, const TrainingState& state, const Json& resolved_config) {
  write_file_atomic(join_path(tmp, kTrainingStateFile), state.to_json().dump(2) + "\n");
  write_file_atomic(join_path(tmp, "config.json"), resolved_config.dump(2) + "\n");
}

std::uint64_t complete_checkpoint(const std::string& run_dir, std::int64_t step, int world_size,
                                  const std::string& strategy_name, const Json& resolved_config, std::int64_t keep_last) {
  const std::string name = step_name(step);
  const std::string dir = checkpoints_dir(run_dir);
  const std::string final_path = join_path(dir, name);
  const std::string tmp = final_path + ".tmp";
  Manifest m;
  m.step = step;
  m.world_size = world_size;
  m.strategy = strategy_name;
  m.config_hash = config::config_hash(resolved_config);
  for (int r = 0; r < world_size; ++r) {
    const std::string index_path = join_path(tmp, rank_index_file(r));
    const Json index = parse_json(read_file(index_path), index_path);
    FT_CHECK(index.is_object() && index.contains("file") && index.contains("shard"), index_path,
             ": expected {\"file\": ..., \"shard\": ...}");
    m.files.push_back(FileEntry::from_json(index["file"], index_path, "file: "));
    m.ranks.push_back(RankShard::from_json(index["shard"], index_path, "shard: "));
    FT_CHECK(m.ranks.back().rank == r, index_path, ": written by rank ", m.ranks.back().rank);
  }
  std::vector<std::string> files;
  list_files(tmp, "", &files);
  for (const std::string& f : files) {
    if (f == kManifestFile || m.find(f) != nullptr) continue;
    m.files.push_back(describe_file(tmp, f));
  }
  std::uint64_t bytes = 0;
  for (const FileEntry& f : m.files) bytes += f.size;
  write_manifest(tmp, m);
  for (const std::string& f : files) {
    const std::string parent = parent_directory(join_path(tmp, f));
    if (parent != tmp) fsync_directory(parent);
  }
  fsync_directory(tmp);
  fault_point("checkpoint.manifest_written");
  if (file_exists(final_path)) {
    // A checkpoint of the same step from before a --resume to an earlier one: this one replaces it.
    log::warn(final_path, " exists (saved before the run was resumed from an earlier checkpoint): replacing it");
    remove_tree(final_path);
  }
  rename_path(tmp, final_path);
  fsync_directory(dir);
  fault_point("checkpoint.renamed");
  point_latest_at(run_dir, name);
  fault_point("checkpoint.latest_written");
  for (const std::string& removed : prune_checkpoints(run_dir, keep_last, final_path))
    log::info("removed ", removed, " (checkpoint.keep_last = ", keep_last, ")");
  return bytes;
}

SaveReport save_checkpoint(const SaveRequest& request, comm::Communicator& comm, parallel::ParallelStrategy& strategy) {
  Stopwatch clock;
  const bool root = comm.is_root();
  const std::string final_path = join_path(checkpoints_dir(request.run_dir), step_name(request.state.step));
  const std::string tmp = final_path + ".tmp";
  const std::string what = str("checkpoint ", final_path);
  auto cleanup = [&] { remove_tree(tmp); };
  Attempt attempt;

  if (root) attempt([&] {
    remove_tree(tmp);
    make_directories(tmp);
  });
  agree(comm, attempt, what, cleanup);
  fault_point("checkpoint.started");

  // This rank's shard and RNG state, and an index of it for the manifest.
  attempt([&] { write_rank_files(tmp, rank_files(strategy, comm, request.device, /*staging=*/nullptr)); });
  fault_point("checkpoint.rank_files_written");

  // The weights as users read them: collective, so every rank calls it whatever happened above.
  try {
    request.write_weights(tmp);
  } catch (const std::exception& e) {
    attempt.fail(e.what());
  }
  if (root) attempt([&] { write_run_files(tmp, request.state, request.resolved_config); });
  agree(comm, attempt, what, cleanup);
  fault_point("checkpoint.files_written");

  std::uint64_t bytes = 0;
  if (root) attempt([&] {
    bytes = complete_checkpoint(request.run_dir, request.state.step, comm.world_size(), strategy.name(),
                                request.resolved_config, request.keep_last);
  });
  agree(comm, attempt, what, cleanup);
  return SaveReport{final_path, clock.seconds(), bytes};
}

}  // namespace ft::checkpoint
