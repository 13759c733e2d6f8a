#include "train/trainer.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <optional>
#include <thread>

#include "checkpoint/async_checkpointer.h"
#include "checkpoint/checkpoint_folder.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/checkpoint_writer.h"
#include "checkpoint/resume.h"
#include "data/data_loader.h"
#include "data/prepared_data.h"
#include "data/tokenizer.h"
#include "gpu/gpu_telemetry.h"
#include "io/dtype.h"
#include "model/causal_lm_loss.h"
#include "model/model_loader.h"
#include "optim/grad_clip.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "optim/spike_guard.h"
#include "parallel/parallel_strategy.h"
#include "train/evaluator.h"
#include "train/memory_tracker.h"
#include "train/metrics_log.h"
#include "train/model_setup.h"
#include "train/progress.h"
#include "train/stop_request.h"
#include "train/loop_state.h"
#include "train/update_decision.h"
#include "util/cpu_threads.h"
#include "util/error.h"
#include "util/fault_point.h"
#include "util/file_util.h"
#include "util/heap_reuse.h"
#include "util/json.h"
#include "util/log.h"
#include "util/timer.h"

namespace ft::train {
namespace {

Json eval_record(std::int64_t step, const EvalResult& r) {
  return Json{{"step", step}, {"eval_loss", r.loss}, {"eval_ppl", r.perplexity}, {"eval_tokens", r.tokens}};
}

// RUN_DIR/quantization.json: what quantizing the base did to each tensor.
Json quantization_json(const model::QuantizationReport& report) {
  Json tensors = Json::array();
  for (const auto& t : report.tensors)
    tensors.push_back({{"name", t.name}, {"dense_bytes", t.dense_bytes}, {"quantized_bytes", t.quantized_bytes},
                       {"relative_rms_error", t.error.relative_rms}, {"max_abs_error", t.error.max_abs}});
  return Json{{"quantization", model::quantization_name(report.quantization)},
              {"dense_bytes", report.dense_bytes()},
              {"quantized_bytes", report.quantized_bytes()},
              {"tensors", tensors}};
}

// run_dir is ours to write into: a new folder, or one an earlier run wrote. One that points at
// something else (a model folder, a home directory) would have its config.json, adapter/ and
// model/ overwritten, so it is refused before anything is written.
void check_run_folder(const config::RunConfig& c) {
  FT_CHECK(!file_exists(c.run_dir) || is_directory(c.run_dir), "run_dir ", c.run_dir, " exists and is not a folder");
  const std::string previous = join_path(c.run_dir, "config.json");
  if (!file_exists(previous)) return;
  bool written_by_a_run = false;
  try {
    const Json json = parse_json_file(previous);
    written_by_a_run = json.is_object() && json.contains("run_dir") && json.contains("train");
  } catch (const Error&) {
  }
  FT_CHECK(written_by_a_run, "run_dir ", c.run_dir, " is not a run folder: its config.json is not a run config ",
           "written by ft_train (a model's config.json?), and a run would overwrite it. Choose a new folder, or ",
           "one an earlier run wrote");
}

// The checkpoint to continue from, opened and checked against this run's config (reader null
// for a fresh start). Every rank reads the same files and so reaches the same verdict.
struct ResumePoint {
  std::unique_ptr<checkpoint::CheckpointReader> reader;
  bool config_changed = false;  // resumed with --resume-force despite math-changing differences
};

ResumePoint open_resume_checkpoint(const config::RunConfig& c, const ResumeOptions& resume) {
  ResumePoint point;
  const std::optional<std::string> dir = checkpoint::checkpoint_to_resume(c, resume.path);
  if (!dir) return point;
  point.reader = std::make_unique<checkpoint::CheckpointReader>(*dir);
  const std::vector<std::string> diffs = checkpoint::math_differences(point.reader->config(), c.resolved);
  point.config_changed = !diffs.empty();
  if (point.config_changed) {
    std::string list;
    for (const auto& d : diffs) list += "\n  " + d;
    FT_CHECK(resume.force, *dir, " was saved with a config that differs in what changes the training:", list,
             "\nresuming would not continue the same run. Use --resume-force to resume anyway, checkpoint.resume "
             "\"none\" (or another run_dir) to start afresh");
    log::warn("resuming despite config changes (--resume-force):", list);
  }
  return point;
}

// Every rank's memory (what it held as the step began, its peak since training began) and GPU
// reading, gathered with one all-reduce into the step's record: memory_bytes, peak_memory_bytes,
// and gpu when a rank has one. A GPU that throttles is reported once per kind on its own rank.
void add_rank_resources(Json& record, comm::Communicator& comm, std::int64_t held_at_step_start,
                        const MemoryTracker& memory, const gpu::GpuTelemetry* gpu, gpu::ThrottleWarner& warner) {
  const std::optional<gpu::GpuSample> reading = gpu ? gpu->sample() : std::nullopt;
  if (reading)
    if (auto warning = warner.check(*reading, comm.rank())) log::warn(*warning);
  const gpu::GpuSample sample = reading.value_or(gpu::GpuSample{});
  Json held = Json::array(), peak = Json::array(), gpus = Json::array();
  bool any_gpu = false;
  for (const auto& row : comm::gather_per_rank(
           comm, {static_cast<double>(held_at_step_start), static_cast<double>(memory.peak_bytes()),
                  reading ? 1.0 : 0.0, sample.temperature_c, sample.power_w, sample.sm_clock_mhz,
                  static_cast<double>(sample.throttle_reasons), sample.utilization_pct})) {
    held.push_back(static_cast<std::int64_t>(row[0]));
    peak.push_back(static_cast<std::int64_t>(row[1]));
    any_gpu = any_gpu || row[2] > 0;
    gpu::GpuSample r;
    r.temperature_c = row[3];
    r.power_w = row[4];
    r.sm_clock_mhz = row[5];
    r.throttle_reasons = static_cast<std::uint64_t>(row[6]);
    r.utilization_pct = row[7];
    gpus.push_back(row[2] > 0 ? gpu::sample_json(r) : Json(nullptr));
  }
  record["memory_bytes"] = held;
  record["peak_memory_bytes"] = peak;
  if (any_gpu) record["gpu"] = gpus;
}

// Loop-invariant facts of a run, fixed once set-up is done.
struct RunPlan {
  std::int64_t world = 1;
  std::int64_t accumulation = 1;
  int threads = 1;
  UpdatePolicy policy;
};

// One optimizer step's numbers, the same on every rank (all-reduced).
struct StepResult {
  double loss = 0;
  double grad_norm = 0;
  double loss_scale = 1;        // the scale this step's loss was multiplied by (1 without scaling)
  double target_tokens = 0;     // the loss's normalizer: target tokens over micro-batches and ranks
  double samples = 0, tokens = 0;  // sequences and tokens seen this step, over ranks
  std::int64_t held_at_start = 0;  // this rank's memory as the step began (model state, batches)
  double compute_s = 0;
  bool stop_requested = false;  // some rank got a stop signal: every rank stops after this step
};

// A training run in named steps: set-up (run folder, resume point, data, model and strategy,
// loader and schedule), then the loop, then the results. run_training is its only user.
class TrainingRun {
 public:
  TrainingRun(const config::RunConfig& c, comm::Communicator& comm, c10::Device device, const ResumeOptions& resume)
      : c_(c), comm_(comm), device_(device), root_(comm.is_root()), memory_(device), state_(c.train) {
    // GPU temperature, power and clocks at every logged step (NVML; none on the CPU or without it).
    if (device.is_cuda()) gpu_ = gpu::GpuTelemetry::open(device.has_index() ? device.index() : 0);
    resume_ = open_resume_checkpoint(c, resume);
    ckpt_ = resume_.reader.get();
    plan_.threads = threads_per_rank(c.train.threads, comm.local_world_size());
    configure_cpu_threads(plan_.threads);
    // Each step reuses the last step's host memory, without page faults.
    keep_freed_heap_memory(device.is_cpu() ? StepMemory::kHost : StepMemory::kDevice);
    // Dropout masks come from LibTorch's default generator: seeded from train.seed so a run repeats
    // exactly, and per rank so ranks do not drop the same positions of different samples.
    at::manual_seed(c.train.seed + static_cast<std::uint64_t>(comm.rank()));
    prepare_run_folder();
    open_data();
    build_model_and_strategy();
    make_loader_and_schedule();
    restore_loop_state();
  }

  TrainSummary run();

 private:
  void prepare_run_folder();
  void open_data();
  void build_model_and_strategy();
  void make_loader_and_schedule();
  void restore_loop_state();

  StepResult train_step(const data::StepData& batch);
  void apply_update(UpdateDecision decision, const StepResult& r, double lr);
  void record_step(const data::StepData& batch, const StepResult& r, double lr, bool skipped, double step_s,
                   double data_wait);
  void evaluate(std::int64_t step);
  double save_checkpoint();
  TrainSummary finish(bool stopped);

  const config::RunConfig& c_;
  comm::Communicator& comm_;
  const c10::Device device_;
  const bool root_;
  MemoryTracker memory_;  // before anything is loaded: on the CPU only tensors allocated after this count
  std::unique_ptr<gpu::GpuTelemetry> gpu_;
  gpu::ThrottleWarner throttle_warner_;
  ResumePoint resume_;
  const checkpoint::CheckpointReader* ckpt_ = nullptr;
  RunPlan plan_;

  std::unique_ptr<data::Tokenizer> tokenizer_;
  std::shared_ptr<data::TokenFile> train_file_, eval_file_;
  TrainableModel tm_;
  std::unique_ptr<parallel::ParallelStrategy> strategy_;
  ForwardHooks hooks_;
  std::unique_ptr<data::TrainDataLoader> loader_;
  std::unique_ptr<optim::LrSchedule> schedule_;
  std::unique_ptr<MetricsLog> metrics_;
  std::unique_ptr<Progress> progress_;

  LoopState state_;
  std::int64_t start_step_ = 0;
  double final_loss_ = 0;
  double final_eval_loss_ = NAN;
  double checkpoint_seconds_ = 0;
  Stopwatch run_clock_;  // from the first step on
  // checkpoint.async. Last: destroyed first, its writer thread joined while the model, strategy
  // and tokenizer its snapshot refers to still exist.
  std::unique_ptr<checkpoint::AsyncCheckpointer> async_saves_;
};

void TrainingRun::prepare_run_folder() {
  if (!root_) return;
  check_run_folder(c_);
  make_directories(c_.run_dir);
  for (const std::string& dir : checkpoint::remove_unfinished(c_.run_dir))
    log::info("removed ", dir, " (a checkpoint save that did not finish)");
  write_file_atomic(join_path(c_.run_dir, "config.json"), c_.resolved.dump(2) + "\n");
  log::info("config (", c_.source, ", resolved):\n", c_.resolved.dump(2));
}

// Token files are built by rank 0 when missing; the others wait for them.
void TrainingRun::open_data() {
  tokenizer_ = std::make_unique<data::Tokenizer>(c_.model.path);
  train_file_ = data::open_token_file(c_, data::Split::kTrain, *tokenizer_, root_, c_.parallel.timeout_s);
  if (!c_.data.eval.empty())
    eval_file_ = data::open_token_file(c_, data::Split::kEval, *tokenizer_, root_, c_.parallel.timeout_s);
  log::info("train: ", train_file_->stats().summary());
}

// The model and its trainable parameters (LoRA or everything), then the strategy that owns them,
// with the optimizer state and RNG of the checkpoint resumed from.
void TrainingRun::build_model_and_strategy() {
  tm_ = build_trainable_model(c_, *tokenizer_, device_);
  if (root_ && tm_.quantization)
    write_file_atomic(join_path(c_.run_dir, "quantization.json"), quantization_json(*tm_.quantization).dump(2) + "\n");
  strategy_ = parallel::make_strategy(c_, comm_, device_);
  strategy_->setup(tm_.trainable, tm_.trainable_layers);
  // What the strategy did not place (FSDP's model loads on the host: frozen weights); parameters
  // already on the device are left alone.
  if (!device_.is_cpu()) tm_.model->to(device_);
  if (ckpt_) {
    Stopwatch load_clock;
    ckpt_->load_optimizer_state(*strategy_, comm_);
    // Dropout continues the same random stream; on another world size ranks hold other samples
    // anyway, so each rank gets a fresh seed that depends on the step.
    if (!ckpt_->restore_rng(comm_.rank(), comm_.world_size(), device_))
      at::manual_seed(c_.train.seed + static_cast<std::uint64_t>(comm_.rank()) +
                      1000003ull * static_cast<std::uint64_t>(ckpt_->state().step));
    log::info("training state loaded from ", ckpt_->dir(), " in ", load_clock.seconds(), " s");
  }
  hooks_ = ForwardHooks{strategy_->layer_runner(c_.train.activation_checkpointing,
                                              {c_.train.offload_activations, c_.train.offload_prefetch}),
                        [this] { strategy_->before_forward(); }};
}

void TrainingRun::make_loader_and_schedule() {
  plan_.world = comm_.world_size();
  plan_.accumulation = config::gradient_accumulation_steps(c_.train.global_batch_size, c_.train.micro_batch_size,
                                                           plan_.world);
  plan_.policy.loss_scaling = config::uses_loss_scaling(c_.train);
  plan_.policy.skip_spikes = c_.train.skip_spikes;
  plan_.policy.on_nonfinite = c_.train.on_nonfinite;
  data::LoaderOptions lo;
  lo.micro_batch_size = c_.train.micro_batch_size;
  lo.accumulation = plan_.accumulation;
  lo.max_seq_len = c_.data.max_seq_len;
  lo.packing = c_.data.packing;
  lo.shuffle = c_.data.shuffle;
  lo.seed = c_.train.seed;
  lo.prefetch = static_cast<std::size_t>(c_.data.prefetch);
  lo.pin_memory = device_.is_cuda();
  loader_ = std::make_unique<data::TrainDataLoader>(train_file_, lo, comm_.rank(), static_cast<int>(plan_.world),
                                                    ckpt_ ? ckpt_->state().sampler : data::SamplerState{});
  std::int64_t total_steps =
      c_.train.max_steps > 0 ? c_.train.max_steps : c_.train.epochs * loader_->steps_per_epoch();
  if (ckpt_ && ckpt_->state().total_steps != total_steps && !resume_.config_changed) {
    // Same config, another world size: an epoch may hold a step more or less (the sampler pads
    // to a multiple of the ranks). The schedule keeps the length it was computed for.
    log::info("keeping the checkpoint's ", ckpt_->state().total_steps, " total steps (", total_steps,
              " on this number of ranks)");
    total_steps = ckpt_->state().total_steps;
  }
  state_.total_steps = total_steps;
  schedule_ = std::make_unique<optim::LrSchedule>(optim::LrSchedule::from_config(c_.train, total_steps));
  log::info(strategy_->name(), " on ", plan_.world, plan_.world == 1 ? " rank" : " ranks", ", ", plan_.threads,
            " BLAS threads each; ", total_steps, " steps of ", c_.train.global_batch_size, " sequences (micro-batch ",
            c_.train.micro_batch_size, " x ", plan_.accumulation, " accumulation x ", plan_.world, " ranks), ",
            loader_->steps_per_epoch(), " steps per epoch");
}

void TrainingRun::restore_loop_state() {
  if (ckpt_) {
    const std::int64_t total_steps = state_.total_steps;
    state_.restore(ckpt_->state(), ckpt_->dir());
    state_.total_steps = total_steps;  // as make_loader_and_schedule decided
    start_step_ = state_.step;
    if (root_) truncate_metrics(join_path(c_.run_dir, "metrics.jsonl"), start_step_, start_step_ < total_steps);
    log::info("resuming from ", ckpt_->dir(), " at step ", start_step_, " of ", total_steps, " (saved on ",
              ckpt_->manifest().world_size, " ranks with ", ckpt_->manifest().strategy, ")");
  }
  metrics_ = std::make_unique<MetricsLog>(join_path(c_.run_dir, "metrics.jsonl"), root_);
  progress_ = std::make_unique<Progress>(state_.total_steps, root_);
}

TrainSummary TrainingRun::run() {
  if (!ckpt_) evaluate(0);
  tm_.model->train();
  memory_.reset_peak();  // peaks of the training steps, not of loading or the first evaluation
  run_clock_.restart();
  double last_wait = loader_->waited_seconds();
  set_stop_honoured(true);
  bool stop = false;
  while (state_.step < state_.total_steps && !stop) {
    Stopwatch step_clock;
    const data::StepData batch = loader_->next();
    state_.position = batch.next_state;
    const double data_wait = loader_->waited_seconds() - last_wait;
    last_wait = loader_->waited_seconds();

    const StepResult r = train_step(batch);
    const double lr = schedule_->lr(state_.step);
    const UpdateDecision decision = decide_update(r.loss, r.grad_norm, plan_.policy, &state_.spike_guard);
    apply_update(decision, r, lr);
    stop = r.stop_requested;
    ++state_.step;
    final_loss_ = r.loss;
    record_step(batch, r, lr, decision != UpdateDecision::kApply, step_clock.seconds(), data_wait);

    const std::int64_t done = state_.step;
    if (c_.log.eval_every_steps > 0 && done % c_.log.eval_every_steps == 0 && done < state_.total_steps) evaluate(done);
    state_.last_lr = lr;
    if (async_saves_) async_saves_->poll();  // a background save made complete once all ranks wrote it
    const bool periodic = c_.checkpoint.every_steps > 0 && done % c_.checkpoint.every_steps == 0;
    if (periodic || (done == state_.total_steps && c_.checkpoint.save_at_end) || stop)
      metrics_->write(Json{{"step", done}, {"checkpoint_s", save_checkpoint()}});
    fault_point("step.done");
  }
  set_stop_honoured(false);
  progress_->finish();
  return finish(stop);
}

// Forward and backward over the step's micro-batches, the gradients finished (reduced by the
// strategy), and the step's loss, gradient norm and stop flag agreed by every rank.
StepResult TrainingRun::train_step(const data::StepData& batch) {
  StepResult r;
  // Normalizer: target tokens of this optimizer step over all micro-batches and ranks.
  std::int64_t local_tokens = 0, local_samples = 0, local_seen = 0;
  for (const auto& b : batch.micro_batches) {
    local_tokens += b.num_target_tokens;
    local_samples += b.num_samples;
    local_seen += b.num_tokens;
  }
  const std::vector<double> counts = comm::all_reduce_values(
      comm_, {static_cast<double>(local_tokens), static_cast<double>(local_samples), static_cast<double>(local_seen)},
      comm::ReduceOp::kSum);
  r.target_tokens = counts[0];
  r.samples = counts[1];
  r.tokens = counts[2];
  // Held before any activation exists: model and optimizer state, prefetched batches. (After
  // the step a backend may still hold its last collective's staging buffers.)
  r.held_at_start = memory_.allocated_bytes();
  r.loss_scale = plan_.policy.loss_scaling ? state_.scaler.scale() : 1.0;

  Stopwatch compute_clock;
  // Summed where the loss is (on a GPU: no host synchronisation inside the micro-batch loop, the
  // batches arrive in pinned memory and copy asynchronously); read once, after the loop.
  torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kDouble).device(device_));
  for (std::size_t m = 0; m < batch.micro_batches.size(); ++m) {
    const data::Batch& b = batch.micro_batches[m];
    strategy_->before_backward(m + 1 == batch.micro_batches.size());
    strategy_->before_forward();
    model::ForwardOptions options;
    options.layer_runner = hooks_.layer_runner;
    options.position_ids = b.position_ids.to(device_, /*non_blocking=*/true);
    if (b.packed) options.segment_ids = b.segment_ids.to(device_, /*non_blocking=*/true);
    model::LossSum loss = model::model_loss(tm_.model, b.input_ids.to(device_, /*non_blocking=*/true),
                                            b.labels.to(device_, /*non_blocking=*/true), options,
                                            c_.train.loss_chunk_tokens);
    if (fault_value("loss.nan")) loss.sum = loss.sum * std::numeric_limits<double>::quiet_NaN();
    (loss.sum * (r.loss_scale / r.target_tokens)).backward();
    loss_sum += loss.sum.detach();
  }
  strategy_->finish_gradients();
  r.compute_s = compute_clock.seconds();

  // The step's loss, and whether any rank got a stop signal.
  const torch::Tensor stop_flag = torch::full({1}, stop_requested() ? 1.0 : 0.0, loss_sum.options());
  const std::vector<double> reduced =
      comm::all_reduce_to_host(comm_, torch::cat({loss_sum.reshape({1}), stop_flag}), comm::ReduceOp::kSum);
  r.loss = reduced[0] / r.target_tokens;
  r.stop_requested = reduced[1] > 0;
  r.grad_norm = std::sqrt(strategy_->grad_sum_of_squares()) / r.loss_scale;
  return r;
}

// Carries out the decision on every rank alike (the loss and norm are the same everywhere).
void TrainingRun::apply_update(UpdateDecision decision, const StepResult& r, double lr) {
  const std::int64_t step = state_.step + 1;  // 1-based, as metrics and messages count
  switch (decision) {
    case UpdateDecision::kApply:
      if (plan_.policy.skip_spikes) state_.spike_guard.record(r.loss, r.grad_norm);
      if (plan_.policy.loss_scaling) state_.scaler.update(false);
      strategy_->step(lr, optim::clip_coefficient(r.grad_norm, c_.train.grad_clip) / r.loss_scale);
      return;
    case UpdateDecision::kSkipOverflow:
      // Overflow at this loss scale: the scale is lowered; not an error.
      state_.scaler.update(true);
      strategy_->skip_step();
      ++state_.overflow_steps;
      log::info("step ", step, ": gradient overflow at loss scale ", r.loss_scale, "; step skipped, scale now ",
                state_.scaler.scale());
      return;
    case UpdateDecision::kSkipSpike:
      state_.spike_guard.record(r.loss, r.grad_norm);
      if (plan_.policy.loss_scaling) state_.scaler.update(false);
      strategy_->skip_step();
      ++state_.spike_steps;
      log::warn("step ", step, ": loss ", r.loss, " or gradient norm ", r.grad_norm, " is more than ",
                c_.train.spike_sigma, " standard deviations above the last steps'; step skipped (train.skip_spikes)");
      return;
    case UpdateDecision::kSkipNonfinite:
      strategy_->skip_step();
      ++state_.skipped_steps;
      log::warn("step ", step, ": non-finite loss or gradient norm, step skipped");
      return;
    case UpdateDecision::kStop: {
      const bool loss_finite = std::isfinite(r.loss);
      FT_CHECK(false, "step ", step, ": the ", loss_finite ? "gradient norm" : "loss", " is ",
               loss_finite ? r.grad_norm : r.loss,
               "; stopping before it reaches the weights (train.on_nonfinite = \"skip\" skips such steps; a lower "
               "train.lr or train.grad_clip may help)");
    }
  }
}

// The step's metrics line (every log.every_steps and the last step) and the progress line.
void TrainingRun::record_step(const data::StepData& batch, const StepResult& r, double lr, bool skipped,
                              double step_s, double data_wait) {
  const parallel::StepTimes times = strategy_->take_step_times();
  const std::int64_t step = state_.step;
  if (step % c_.log.every_steps != 0 && step != state_.total_steps) return;
  Json record = {{"step", step},
                 {"epoch", batch.epoch_progress},
                 {"loss", r.loss},
                 {"lr", lr},
                 {"grad_norm", r.grad_norm},
                 {"tokens_per_s", r.tokens / step_s},
                 {"samples_per_s", r.samples / step_s},
                 {"target_tokens", static_cast<std::int64_t>(r.target_tokens)},
                 {"time", {{"step", step_s},
                           {"data_wait", data_wait},
                           {"compute", r.compute_s - times.communication},
                           {"communication", times.communication},
                           {"optimizer", times.optimizer}}},
                 {"comm_bytes", times.bytes_reduced},
                 {"peak_rss_bytes", peak_rss_bytes()},
                 {"skipped", skipped}};
  add_rank_resources(record, comm_, r.held_at_start, memory_, gpu_.get(), throttle_warner_);
  if (plan_.policy.loss_scaling) record["loss_scale"] = r.loss_scale;
  if (c_.train.skip_spikes) record["spike_steps"] = state_.spike_steps;
  metrics_->write(record);
  progress_->update(step, r.loss, r.tokens / step_s, run_clock_.seconds());
}

void TrainingRun::evaluate(std::int64_t step) {
  if (!eval_file_) return;
  EvalResult r = train::evaluate(tm_.model, *eval_file_, c_.train.micro_batch_size, c_.data.max_seq_len,
                                 c_.data.packing, comm_, hooks_, c_.train.loss_chunk_tokens);
  metrics_->write(eval_record(step, r));
  progress_->print(str("step ", step, ": eval loss ", r.loss, ", perplexity ", r.perplexity));
  if (std::isnan(state_.first_eval_loss)) state_.first_eval_loss = r.loss;
  final_eval_loss_ = r.loss;
}

// A checkpoint of the loop state after the last step, with the strategy's shards and the
// adapter or model; returns the seconds it took.
double TrainingRun::save_checkpoint() {
  checkpoint::SaveRequest request;
  request.run_dir = c_.run_dir;
  request.keep_last = c_.checkpoint.keep_last;
  request.resolved_config = c_.resolved;
  request.device = device_;
  request.state = state_.to_training_state(strategy_->optimizer().step_count());
  request.write_weights = [this](const std::string& dir) {
    write_trained_weights(c_, tm_, *strategy_, comm_, *tokenizer_, join_path(dir, tm_.lora ? "adapter" : "model"));
  };
  if (c_.checkpoint.async) {
    request.snapshot_weights = [this](checkpoint::HostStaging& staging) {
      return snapshot_trained_weights(c_, tm_, *strategy_, comm_, *tokenizer_, staging);
    };
    if (!async_saves_) async_saves_ = std::make_unique<checkpoint::AsyncCheckpointer>(comm_);
    const double held = async_saves_->start(request, *strategy_);
    checkpoint_seconds_ += held;
    if (root_) log::info("checkpoint of step ", request.state.step, " started: training held ", held,
                         " s for the copy, the files are written in the background");
    return held;
  }
  const checkpoint::SaveReport report = checkpoint::save_checkpoint(request, comm_, *strategy_);
  checkpoint_seconds_ += report.seconds;
  if (root_) log::info("checkpoint ", report.path, " saved in ", report.seconds, " s (", report.bytes / 1e6, " MB)");
  return report.seconds;
}

// After the loop: stopped by a signal (the checkpoint is saved, nothing else), or the final
// evaluation and the adapter or model.
TrainSummary TrainingRun::finish(bool stopped) {
  TrainSummary summary;
  summary.seconds = run_clock_.seconds();
  summary.steps = state_.step;
  summary.resumed_from_step = start_step_;
  summary.final_loss = final_loss_;
  summary.checkpoint_seconds = checkpoint_seconds_;
  const std::int64_t total_steps = state_.total_steps;
  if (stopped) {
    if (async_saves_) async_saves_->finish();  // the stop's checkpoint, complete before the exit
    summary.stopped_by_signal = true;
    summary.skipped_steps = state_.skipped_steps;
    summary.first_eval_loss = state_.first_eval_loss;
    summary.final_eval_loss = final_eval_loss_;
    log::info("stopped by a signal after step ", summary.steps, " of ", total_steps,
              "; the checkpoint is saved: run the same command again to continue");
    return summary;
  }
  if (start_step_ == total_steps && total_steps > 0 && root_)
    log::info("the checkpoint is at the last step: evaluating and writing the results again");
  evaluate(total_steps);
  summary.skipped_steps = state_.skipped_steps;
  summary.first_eval_loss = state_.first_eval_loss;
  summary.final_eval_loss = final_eval_loss_;

  if (c_.checkpoint.save_at_end) {
    save_result(c_, tm_, *strategy_, comm_, *tokenizer_);
  } else if (root_) {
    log::info("checkpoint.save_at_end is false: the ", c_.lora ? "adapter" : "model",
              " is not written, nor a checkpoint of the last step beyond a periodic one");
  }
  // The last background save was written during the final evaluation and the results.
  if (async_saves_) async_saves_->finish();
  comm_.barrier();
  return summary;
}

}  // namespace

TrainSummary run_training(const config::RunConfig& c, comm::Communicator& comm, c10::Device device,
                          const ResumeOptions& resume) {
  TrainingRun run(c, comm, device, resume);
  const TrainSummary summary = run.run();
  if (!summary.stopped_by_signal)
    log::info("done: ", summary.steps, " steps in ", summary.seconds, " s; final loss ", summary.final_loss,
              std::isnan(summary.final_eval_loss)
                  ? std::string()
                  : str(", eval loss ", summary.first_eval_loss, " -> ", summary.final_eval_loss));
  return summary;
}

}  // namespace ft::train
