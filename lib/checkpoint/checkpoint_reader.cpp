#include "checkpoint/checkpoint_reader.h"

#include <torch/torch.h>

#include <map>
#include <memory>

#include "checkpoint/checkpoint_folder.h"
#include "checkpoint/checkpoint_writer.h"
#include "checkpoint/rng_state.h"
#include "io/safetensors.h"
#include "parallel/optimizer_shard.h"
#include "util/error.h"
#include "util/file_util.h"
#include "util/log.h"

namespace ft::checkpoint {

CheckpointReader::CheckpointReader(std::string dir) : dir_(std::move(dir)) {
  FT_CHECK(is_directory(dir_), dir_, ": no such checkpoint folder");
  manifest_ = read_manifest(dir_);
  verify_file(dir_, manifest_, kTrainingStateFile);
  const std::string state_path = join_path(dir_, kTrainingStateFile);
  state_ = TrainingState::from_json(parse_json(read_file(state_path), state_path), state_path);
  FT_CHECK(state_.step == manifest_.step, state_path, ": step ", state_.step, " but the manifest says ", manifest_.step);
  verify_file(dir_, manifest_, "config.json");
  const std::string config_path = join_path(dir_, "config.json");
  config_ = parse_json(read_file(config_path), config_path);
}

void CheckpointReader::load_optimizer_state(parallel::ParallelStrategy& strategy, comm::Communicator& comm) const {
  std::string error;
  try {
    torch::NoGradGuard no_grad;
    // Straight into the live buffers (no shard-sized temporaries: on a loaded host, touching
    // fresh memory is what costs most); padding between pieces keeps its zeros.
    parallel::OptimizerShard& shard = strategy.optimizer_shard();
    const optim::AdamWState live = shard.optimizer().state();
    const at::Tensor& master = shard.master();
    const at::Tensor& exp_avg = live.exp_avg;
    const at::Tensor& exp_avg_sq = live.exp_avg_sq;

    // Saved pieces by parameter name.
    struct Saved {
      int rank;
      const parallel::ShardPiece* piece;
    };
    std::map<std::string, std::vector<Saved>> saved;
    for (const RankShard& r : manifest_.ranks)
      for (const auto& p : r.pieces) saved[p.name].push_back({r.rank, &p});
    std::map<int, std::unique_ptr<io::SafetensorsReader>> files;
    auto open = [&](int rank) -> const io::SafetensorsReader& {
      auto& reader = files[rank];
      if (!reader) {
        const RankShard& r = manifest_.ranks[static_cast<std::size_t>(rank)];
        verify(r.file);
        reader = std::make_unique<io::SafetensorsReader>(join_path(dir_, r.file));
        for (const char* name : {"master", "exp_avg", "exp_avg_sq"}) {
          const io::TensorInfo& t = reader->info(name);
          FT_CHECK(t.dtype->scalar == torch::kFloat && t.numel() == r.numel && t.shape.size() == 1, reader->path(),
                   ": tensor ", name, " must be float32 [", r.numel, "]");
        }
      }
      return *reader;
    };

    for (const parallel::ShardPiece& want : strategy.shard_pieces()) {
      std::int64_t covered = 0;
      auto found = saved.find(want.name);
      FT_CHECK(found != saved.end(), dir_, ": holds no optimizer state for parameter ", want.name,
               " (was it trained with other LoRA targets or another model?)");
      for (const Saved& s : found->second) {
        const std::int64_t from = std::max(want.param_offset, s.piece->param_offset);
        const std::int64_t to = std::min(want.param_offset + want.length, s.piece->param_offset + s.piece->length);
        if (from >= to) continue;
        const io::SafetensorsReader& file = open(s.rank);
        const std::int64_t src = s.piece->shard_offset + (from - s.piece->param_offset);
        const std::int64_t dst = want.shard_offset + (from - want.param_offset);
        master.narrow(0, dst, to - from).copy_(file.view("master").narrow(0, src, to - from));
        exp_avg.narrow(0, dst, to - from).copy_(file.view("exp_avg").narrow(0, src, to - from));
        exp_avg_sq.narrow(0, dst, to - from).copy_(file.view("exp_avg_sq").narrow(0, src, to - from));
        covered += to - from;
      }
      FT_CHECK(covered == want.length, dir_, ": the saved shards cover ", covered, " of the ", want.length,
               " elements of ", want.name, " that rank ", comm.rank(), " needs from offset ", want.param_offset,
               " (the parameter's shape changed?)");
    }
    shard.optimizer().set_step_count(state_.optimizer_updates);
  } catch (const std::exception& e) {
    error = e.what();
  }
  const double failures = comm::all_reduce_scalar(comm, error.empty() ? 0.0 : 1.0, comm::ReduceOp::kSum);
  FT_CHECK(error.empty(), error);
  FT_CHECK(failures == 0, dir_, ": another rank could not read its optimizer state (its error is above)");
  strategy.reload_parameters_from_master();
}

void CheckpointReader::verify(const std::string& relative) const {
  if (verified_.count(relative) != 0) return;
  verify_file(dir_, manifest_, relative);
  verified_.insert(relative);
}

bool CheckpointReader::restore_rng(int rank, int world_size, c10::Device device) const {
  if (world_size != manifest_.world_size) return false;
  const RankShard& r = manifest_.ranks[static_cast<std::size_t>(rank)];
  verify(r.file);
  io::SafetensorsReader file(join_path(dir_, r.file));
  checkpoint::restore_rng(file, device);
  return true;
}

}  // namespace ft::checkpoint
