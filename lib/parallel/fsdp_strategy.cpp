// FSDP: units per decoder layer, parameters gathered around each use and freed after, gradients
// reduce-scattered per unit during backward, AdamW on this rank's chunks.
#include "parallel/fsdp_strategy.h"

#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <utility>

#include "optim/grad_clip.h"
#include "util/error.h"
#include "util/timer.h"

namespace ft::parallel {
namespace {

// Frees a tensor's memory while every tensor that views it (the module's parameters, autograd's
// saved references) keeps its shape; allocate_storage gives it memory again. PyTorch's FSDP
// does the same with storage().resize_(0).
void release_storage(const at::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  s->set_nbytes(0);
}

void allocate_storage(const at::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  FT_ASSERT(s->allocator() != nullptr, "FSDP: a parameter buffer without an allocator");
  const std::size_t nbytes = t.nbytes();
  s->set_data_ptr_noswap(s->allocator()->allocate(nbytes));
  s->set_nbytes(nbytes);
}

}  // namespace

FsdpStrategy::FsdpStrategy(comm::Communicator& comm, StrategyOptions options) : comm_(comm), options_(options) {}

// No collective here (a rank unwinding from an error must not wait for the others): released
// layers stay released, and the model's parameters are only usable through the strategy.
FsdpStrategy::~FsdpStrategy() = default;

void FsdpStrategy::setup(NamedParameters params, const std::vector<std::int64_t>& layers_of) {
  FT_CHECK(!params.empty(), "there are no trainable parameters");
  FT_CHECK(layers_of.size() == params.size(), "FSDP: ", layers_of.size(), " layer indices for ", params.size(),
           " parameters");
  // Units: the root one (parameters outside the decoder layers), then one per layer, in order.
  std::vector<std::size_t> root;
  std::map<std::int64_t, std::vector<std::size_t>> by_layer;
  std::vector<std::int64_t> numels;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::int64_t layer = layers_of[i];
    (layer < 0 ? root : by_layer[layer]).push_back(i);
    numels.push_back(params[i].second.numel());
    slot_names_.push_back(params[i].first);
  }
  slot_numels_ = numels;
  std::vector<std::vector<std::size_t>> groups;
  if (!root.empty()) groups.push_back(root);
  std::int64_t layers = 0;
  for (auto& [layer, slots] : by_layer) {
    groups.push_back(slots);
    layers = std::max(layers, layer + 1);
  }
  layout_ = std::make_unique<ShardLayout>(numels, comm_.world_size(), comm_.rank(), groups);
  unit_of_layer_.assign(static_cast<std::size_t>(layers), -1);
  slot_refs_.assign(params.size(), {});

  torch::NoGradGuard no_grad;
  const at::Tensor& first = params[0].second;
  const auto options = first.options().device(options_.device);
  shard_values_ = torch::empty({layout_->shard_numel()}, options);
  std::vector<FlatSlot> flat_slots;  // every parameter at its offset in the (virtual) whole flat buffer
  std::vector<at::Tensor> tensors;
  for (auto& [name, p] : params) tensors.push_back(p);
  for (std::size_t b = 0; b < layout_->buckets().size(); ++b) {
    const ShardBucket& bucket = layout_->buckets()[b];
    NamedParameters unit_params;
    std::vector<std::int64_t> offsets;
    for (std::size_t s : bucket.slots) {
      slot_refs_[s] = {b, unit_params.size()};
      unit_params.push_back(params[s]);
      offsets.push_back(layout_->slot_offsets()[s] - bucket.begin);
    }
    const std::int64_t layer = layers_of[bucket.slots.front()];
    Unit unit;
    unit.bucket = b;
    unit.resident = layer < 0;
    // Built on the training device: the model may sit on the host, one unit at a time moves over.
    unit.flat = std::make_unique<FlatParameters>(std::move(unit_params), offsets, layout_->region_numel(bucket),
                                                 /*with_grads=*/false, options_.device);
    if (layer >= 0) unit_of_layer_[static_cast<std::size_t>(layer)] = static_cast<int>(b);
    // Every rank starts from rank 0's weights; keep this rank's chunk, then free the rest.
    at::Tensor& values = unit.flat->values();
    comm_.broadcast(values, 0)->wait();
    shard_values_.narrow(0, bucket.shard_offset, bucket.chunk)
        .copy_(values.narrow(0, layout_->chunk_begin(bucket) - bucket.begin, bucket.chunk));
    for (FlatSlot slot : unit.flat->slots()) {
      slot.offset += bucket.begin;
      flat_slots.push_back(std::move(slot));
    }
    unit.gathered = true;
    gathered_bytes_ += values.nbytes();
    units_.push_back(std::move(unit));
    release(units_.back());
  }
  peak_gathered_bytes_ = gathered_bytes_;

  std::sort(flat_slots.begin(), flat_slots.end(), [](const FlatSlot& a, const FlatSlot& b) { return a.offset < b.offset; });
  auto segments = layout_->shard_segments(decay_segments(flat_slots, layout_->numel(), options_.decay_norms));
  // fp32 without offload: the parameter chunks are the master weights themselves.
  const bool alias = !options_.offload_optimizer && first.scalar_type() == at::kFloat;
  shard_ = std::make_unique<OptimizerShard>(shard_values_, alias, std::move(segments), options_);
  shard_grad_ = torch::zeros({layout_->shard_numel()}, options);
  reduce_scatter_ = std::make_unique<ReduceScatterBuckets>(*layout_, std::move(tensors), comm_, shard_grad_,
                                                           options_.grad_comm_dtype, options_.overlap_grad_reduce);
  reduce_scatter_->on_launch([this](std::size_t b) { release(units_[b]); });
}

void FsdpStrategy::gather(Unit& unit) {
  if (!unit.gathered) ++gathers_at_use_;
  start_gather(unit);
  finish_gather(unit);
}

void FsdpStrategy::start_gather(Unit& unit) {
  if (unit.gathered) return;
  // Counted (and the memory taken) when issued: a prefetched unit occupies its buffer from here.
  allocate_storage(unit.flat->values());
  unit.gathered = true;
  gathered_bytes_ += unit.flat->values().nbytes();
  peak_gathered_bytes_ = std::max(peak_gathered_bytes_, gathered_bytes_);
  issue_all_gather(unit);
}

void FsdpStrategy::issue_all_gather(Unit& unit) {
  Stopwatch watch;
  torch::NoGradGuard no_grad;
  at::Tensor& values = unit.flat->values();
  const ShardBucket& b = layout_->buckets()[unit.bucket];
  unit.pending = comm_.all_gather(values, shard_values_.narrow(0, b.shard_offset, b.chunk));
  if (comm_.world_size() > 1) times_.bytes_reduced += static_cast<double>(values.nbytes());
  times_.communication += watch.seconds();
}

void FsdpStrategy::finish_gather(Unit& unit) {
  if (!unit.pending) return;
  Stopwatch watch;
  std::shared_ptr<comm::Work> work = std::move(unit.pending);
  work->wait();
  times_.communication += watch.seconds();
}

void FsdpStrategy::prefetch_after(std::size_t unit, bool backward) {
  // The layer units follow the root unit in layer order: the next ones in execution order are
  // the neighbours, up to the root unit (or the end) on either side.
  for (std::size_t i = 1; i <= options_.fsdp_prefetch; ++i) {
    if (backward ? unit < i : unit + i >= units_.size()) break;
    Unit& next = units_[backward ? unit - i : unit + i];
    if (next.resident) break;
    start_gather(next);
  }
}

void FsdpStrategy::release(Unit& unit) {
  if (!unit.gathered || unit.resident) return;
  finish_gather(unit);  // Gloo or NCCL may still be writing into the buffer
  gathered_bytes_ -= unit.flat->values().nbytes();
  release_storage(unit.flat->values());
  unit.gathered = false;
}

void FsdpStrategy::release_layers() {
  for (Unit& u : units_) release(u);
}

std::size_t FsdpStrategy::gathered_units() const {
  return static_cast<std::size_t>(std::count_if(units_.begin(), units_.end(), [](const Unit& u) { return u.gathered; }));
}

std::size_t FsdpStrategy::take_gathers_at_use() { return std::exchange(gathers_at_use_, 0); }

model::LayerRunner FsdpStrategy::layer_runner(bool activation_checkpointing, model::InputOffload offload) {
  // The gathers wrap the default runner: checkpointing (and its offload) or the plain layer.
  model::LayerRunner inner = ParallelStrategy::layer_runner(activation_checkpointing, offload);
  return [this, inner](std::size_t index, model::DecoderLayer& layer, const torch::Tensor& x,
                       const model::LayerInputs& in) -> torch::Tensor {
    auto run = [&] { return inner ? inner(index, layer, x, in) : layer(x, in.cos, in.sin, in.mask, in.cache); };
    const int u = index < unit_of_layer_.size() ? unit_of_layer_[index] : -1;
    if (u < 0) return run();  // no trainable parameter in this layer: nothing sharded
    gather(units_[u]);
    prefetch_after(u, /*backward=*/false);
    torch::Tensor y = run();
    if (y.requires_grad()) {
      // Backward reaches this layer when y's gradient is ready: gather again before the layer's
      // backward (with checkpointing, its recomputation) reads the parameters, and send for the
      // layers below. The unit is released when its gradients have been handed to the reduce-scatter.
      y.register_hook([this, u](const torch::Tensor&) {
        gather(units_[u]);
        prefetch_after(u, /*backward=*/true);
      });
      // Without resharding every layer stays whole until its backward; with prefetch on, the last
      // layer does, as its backward comes next.
      if (!options_.fsdp_reshard_after_forward) return y;
      if (options_.fsdp_prefetch > 0 && static_cast<std::size_t>(u) + 1 == units_.size()) return y;
    }
    release(units_[u]);
    return y;
  };
}

void FsdpStrategy::before_backward(bool) {
  // Every micro-batch is reduce-scattered, as ZeRO-2: there is no full gradient to accumulate in.
  times_.communication += reduce_scatter_->begin_backward();
}

void FsdpStrategy::finish_gradients() {
  times_.communication += reduce_scatter_->finish() + reduce_scatter_->take_wait_in_backward();
  times_.bytes_reduced += reduce_scatter_->take_bytes();
  release_layers();  // a layer whose backward did not run
}

double FsdpStrategy::grad_sum_of_squares() {
  const double local = optim::local_sum_of_squares({shard_grad_}).item<double>();
  return comm::all_reduce_scalar(comm_, local, comm::ReduceOp::kSum);
}

void FsdpStrategy::step(double lr, double clip_coef) {
  Stopwatch watch;
  torch::NoGradGuard no_grad;
  shard_->step(shard_->fp32_gradient({shard_grad_}), lr, clip_coef);
  reload_parameters_from_master();
  shard_grad_.zero_();
  times_.optimizer += watch.seconds();
}

void FsdpStrategy::reload_parameters_from_master() {
  torch::NoGradGuard no_grad;
  // A layer still whole (a forward whose backward never ran) would keep the old values.
  release_layers();
  if (!shard_->aliased()) shard_->copy_master_to(shard_values_);
  // The root unit stays whole: gather its updated values into it now. The layers gather at their use.
  for (Unit& u : units_) {
    if (!u.resident) continue;
    issue_all_gather(u);
    finish_gather(u);
  }
}

std::vector<ShardPiece> FsdpStrategy::shard_pieces() const { return layout_->shard_pieces(slot_names_, slot_numels_); }

void FsdpStrategy::skip_step() { shard_grad_.zero_(); }

MemoryReport FsdpStrategy::memory() const {
  MemoryReport m;
  m.parameters = shard_values_.nbytes();
  m.gradients = shard_grad_.nbytes();
  (shard_->offloaded() ? m.host_optimizer : m.optimizer) = shard_->state_bytes();
  m.host_gradients = shard_->host_gradient_bytes();
  m.grad_staging = reduce_scatter_->peak_staging_bytes();
  m.gathered = peak_gathered_bytes_;
  return m;
}

void FsdpStrategy::for_each_full_parameter(const std::function<void(const std::string&, const at::Tensor&)>& fn) {
  // In model order, one unit whole at a time (besides the root one), on every rank alike.
  Unit* current = nullptr;
  for (const SlotRef& ref : slot_refs_) {
    Unit& unit = units_[ref.unit];
    if (&unit != current) {
      if (current != nullptr) release(*current);
      current = &unit;
      gather(unit);
    }
    if (!comm_.is_root()) continue;
    const FlatSlot& slot = unit.flat->slots()[ref.index];
    fn(slot.name, unit.flat->values().narrow(0, slot.offset, slot.numel).view(slot.shape));
  }
  if (current != nullptr) release(*current);
}

StepTimes FsdpStrategy::take_step_times() {
  StepTimes t = times_;
  times_ = {};
  return t;
}

}  // namespace ft::parallel
