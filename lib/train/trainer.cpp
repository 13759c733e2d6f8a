#include "train/trainer.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <optional>
#include <thread>

#include "checkpoint/checkpoint_folder.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/checkpoint_writer.h"
#include "checkpoint/resume.h"
#include "data/data_loader.h"
#include "data/prepared_data.h"
#include "data/tokenizer.h"
#include "dist/gpu_telemetry.h"
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
#include "util/cpu_threads.h"
#include "util/error.h"
#include "util/fault_point.h"
#include "util/file_util.h"
#include "util/json.h"
#include "util/log.h"
#include "util/timer.h"

namespace ft::train {
namespace {

int threads_per_rank(const config::RunConfig& c) {
  if (c.train.threads > 0) return static_cast<int>(c.train.threads);
  const char* local = std::getenv("LOCAL_WORLD_SIZE");
  const int local_ranks = local != nullptr ? std::max(1, std::atoi(local)) : 1;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / local_ranks);
}

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
void add_rank_resources(Json& record, dist::Communicator& comm, std::int64_t held_at_step_start,
                        const MemoryTracker& memory, const dist::GpuTelemetry* gpu, dist::ThrottleWarner& warner) {
  const std::optional<dist::GpuSample> reading = gpu ? gpu->sample() : std::nullopt;
  if (reading)
    if (auto warning = warner.check(*reading, comm.rank())) log::warn(*warning);
  const dist::GpuSample sample = reading.value_or(dist::GpuSample{});
  Json held = Json::array(), peak = Json::array(), gpus = Json::array();
  bool any_gpu = false;
  for (const auto& row : dist::gather_per_rank(
           comm, {static_cast<double>(held_at_step_start), static_cast<double>(memory.peak_bytes()),
                  reading ? 1.0 : 0.0, sample.temperature_c, sample.power_w, sample.sm_clock_mhz,
                  static_cast<double>(sample.throttle_reasons), sample.utilization_pct})) {
    held.push_back(static_cast<std::int64_t>(row[0]));
    peak.push_back(static_cast<std::int64_t>(row[1]));
    any_gpu = any_gpu || row[2] > 0;
    dist::GpuSample r;
    r.temperature_c = row[3];
    r.power_w = row[4];
    r.sm_clock_mhz = row[5];
    r.throttle_reasons = static_cast<std::uint64_t>(row[6]);
    r.utilization_pct = row[7];
    gpus.push_back(row[2] > 0 ? dist::sample_json(r) : Json(nullptr));
  }
  record["memory_bytes"] = held;
  record["peak_memory_bytes"] = peak;
  if (any_gpu) record["gpu"] = gpus;
}

}  // namespace

TrainSummary run_training(const config::RunConfig& c, dist::Communicator& comm, c10::Device device,
                          const ResumeOptions& resume) {
  const bool root = comm.is_root();
  // Before anything is loaded: on the CPU only tensors allocated after this are counted.
  MemoryTracker memory(device);
  // GPU temperature, power and clocks at every logged step (NVML; none on the CPU or without it).
  const std::unique_ptr<dist::GpuTelemetry> gpu = device.is_cuda() ? dist::GpuTelemetry::open(device.has_index() ? device.index() : 0) : nullptr;
  dist::ThrottleWarner throttle_warner;
  const ResumePoint resume_point = open_resume_checkpoint(c, resume);
  const checkpoint::CheckpointReader* ckpt = resume_point.reader.get();
  const std::int64_t start_step = ckpt ? ckpt->state().step : 0;
  configure_cpu_threads(threads_per_rank(c));
  // Dropout masks come from LibTorch's default generator: seeded from train.seed so a run repeats
  // exactly, and per rank so ranks do not drop the same positions of different samples.
  at::manual_seed(c.train.seed + static_cast<std::uint64_t>(comm.rank()));
  if (root) {
    check_run_folder(c);
    make_directories(c.run_dir);
    for (const std::string& dir : checkpoint::remove_unfinished(c.run_dir))
      log::info("removed ", dir, " (a checkpoint save that did not finish)");
    write_file_atomic(join_path(c.run_dir, "config.json"), c.resolved.dump(2) + "\n");
    log::info("config (", c.source, ", resolved):\n", c.resolved.dump(2));
  }

  // Data: token files are built by rank 0 when missing; the others wait for them.
  data::Tokenizer tokenizer(c.model.path);
  auto train_file = data::open_token_file(c, data::Split::kTrain, tokenizer, root, c.parallel.timeout_s);
  std::shared_ptr<data::TokenFile> eval_file;
  if (!c.data.eval.empty()) eval_file = data::open_token_file(c, data::Split::kEval, tokenizer, root, c.parallel.timeout_s);
  log::info("train: ", train_file->stats().summary());

  // Model and trainable parameters (LoRA or everything), then the strategy that owns them.
  TrainableModel tm = build_trainable_model(c, tokenizer, device);
  if (root && tm.quantization)
    write_file_atomic(join_path(c.run_dir, "quantization.json"), quantization_json(*tm.quantization).dump(2) + "\n");
  auto strategy = parallel::make_strategy(c, comm, device);
  strategy->setup(tm.trainable);
  // What the strategy did not place (FSDP's model loads on the host: frozen weights); parameters
  // already on the device are left alone.
  if (!device.is_cpu()) tm.model->to(device);
  if (ckpt) {
    Stopwatch load_clock;
    ckpt->load_optimizer_state(*strategy, comm);
    // Dropout continues the same random stream; on another world size ranks hold other samples
    // anyway, so each rank gets a fresh seed that depends on the step.
    if (!ckpt->restore_rng(comm.rank(), comm.world_size(), device))
      at::manual_seed(c.train.seed + static_cast<std::uint64_t>(comm.rank()) + 1000003ull * static_cast<std::uint64_t>(start_step));
    log::info("training state loaded from ", ckpt->dir(), " in ", load_clock.seconds(), " s");
  }
  const ForwardHooks hooks{strategy->layer_runner(c.train.activation_checkpointing),
                           [&strategy] { strategy->before_forward(); }};

  const std::int64_t world = comm.world_size();
  const std::int64_t accumulation = config::gradient_accumulation_steps(c.train.global_batch_size,
                                                                        c.train.micro_batch_size, world);
  data::LoaderOptions lo;
  lo.micro_batch_size = c.train.micro_batch_size;
  lo.accumulation = accumulation;
  lo.max_seq_len = c.data.max_seq_len;
  lo.packing = c.data.packing;
  lo.shuffle = c.data.shuffle;
  lo.seed = c.train.seed;
  lo.prefetch = static_cast<std::size_t>(c.data.prefetch);
  lo.pin_memory = device.is_cuda();
  data::TrainDataLoader loader(train_file, lo, comm.rank(), static_cast<int>(world),
                              ckpt ? ckpt->state().sampler : data::SamplerState{});
  std::int64_t total_steps = c.train.max_steps > 0 ? c.train.max_steps : c.train.epochs * loader.steps_per_epoch();
  if (ckpt && ckpt->state().total_steps != total_steps && !resume_point.config_changed) {
    // Same config, another world size: an epoch may hold a step more or less (the sampler pads
    // to a multiple of the ranks). The schedule keeps the length it was computed for.
    log::info("keeping the checkpoint's ", ckpt->state().total_steps, " total steps (", total_steps,
              " on this number of ranks)");
    total_steps = ckpt->state().total_steps;
  }
  const optim::LrSchedule schedule = optim::LrSchedule::from_config(c.train, total_steps);
  log::info(strategy->name(), " on ", world, world == 1 ? " rank" : " ranks", ", ", threads_per_rank(c),
            " BLAS threads each; ", total_steps, " steps of ", c.train.global_batch_size, " sequences (micro-batch ",
            c.train.micro_batch_size, " x ", accumulation, " accumulation x ", world, " ranks), ",
            loader.steps_per_epoch(), " steps per epoch");

  // fp16 gradients underflow without scaling: the loss is multiplied by a dynamic scale before
  // backward and the gradients divided by it in the optimizer step (folded into the clip
  // coefficient). The overflow decision uses the global gradient norm, the same on every rank.
  const bool scale_loss = c.train.loss_scale == "dynamic" || (c.train.loss_scale == "auto" && c.train.precision == "fp16");
  optim::LossScalerOptions scaler_options;
  scaler_options.init_scale = c.train.loss_scale_init;
  scaler_options.growth_interval = c.train.loss_scale_growth_interval;
  optim::LossScaler scaler(scaler_options);
  std::int64_t overflow_steps = 0;
  optim::SpikeGuard spike_guard(optim::SpikeGuardOptions{static_cast<std::size_t>(c.train.spike_window), c.train.spike_sigma});
  std::int64_t spike_steps = 0;

  TrainSummary summary;
  summary.first_eval_loss = summary.final_eval_loss = NAN;
  if (ckpt) {
    const checkpoint::TrainingState& state = ckpt->state();
    scaler.load_state_json(state.loss_scaler, ckpt->dir());
    overflow_steps = state.overflow_steps;
    spike_steps = state.spike_steps;
    if (c.train.skip_spikes && !state.spike_guard.empty()) spike_guard.load_state_json(state.spike_guard, ckpt->dir());
    summary.skipped_steps = state.skipped_steps;
    summary.first_eval_loss = state.first_eval_loss;
    summary.steps = summary.resumed_from_step = start_step;
    if (root) truncate_metrics(join_path(c.run_dir, "metrics.jsonl"), start_step, start_step < total_steps);
    log::info("resuming from ", ckpt->dir(), " at step ", start_step, " of ", total_steps, " (saved on ",
              ckpt->manifest().world_size, " ranks with ", ckpt->manifest().strategy, ")");
  }
  MetricsLog metrics(join_path(c.run_dir, "metrics.jsonl"), root);
  Progress progress(total_steps, root);
  // Where the sampler stands after the last step trained (the prefetcher may have read ahead).
  data::SamplerState position = ckpt ? ckpt->state().sampler : data::SamplerState{};
  double last_lr = ckpt ? ckpt->state().lr : 0.0;  // the learning rate of the last step trained
  auto save = [&](std::int64_t steps_done) -> double {
    checkpoint::SaveRequest request;
    request.run_dir = c.run_dir;
    request.keep_last = c.checkpoint.keep_last;
    request.resolved_config = c.resolved;
    request.device = device;
    checkpoint::TrainingState& state = request.state;
    state.step = steps_done;
    state.total_steps = total_steps;
    state.optimizer_updates = strategy->optimizer().step_count();
    state.sampler = position;
    state.loss_scaler = scaler.state_json();
    state.skipped_steps = summary.skipped_steps;
    state.overflow_steps = overflow_steps;
    state.spike_steps = spike_steps;
    if (c.train.skip_spikes) state.spike_guard = spike_guard.state_json();
    state.first_eval_loss = summary.first_eval_loss;
    state.lr = last_lr;
    request.write_weights = [&](const std::string& dir) {
      write_trained_weights(c, tm, *strategy, comm, tokenizer, join_path(dir, tm.lora ? "adapter" : "model"));
    };
    const checkpoint::SaveReport report = checkpoint::save_checkpoint(request, comm, *strategy);
    summary.checkpoint_seconds += report.seconds;
    if (root) log::info("checkpoint ", report.path, " saved in ", report.seconds, " s (", report.bytes / 1e6, " MB)");
    return report.seconds;
  };
  auto run_eval = [&](std::int64_t step) {
    if (!eval_file) return;
    EvalResult r =
        evaluate(tm.model, *eval_file, c.train.micro_batch_size, c.data.max_seq_len, c.data.packing, comm, hooks,
                 c.train.loss_chunk_tokens);
    metrics.write(eval_record(step, r));
    progress.print(str("step ", step, ": eval loss ", r.loss, ", perplexity ", r.perplexity));
    if (std::isnan(summary.first_eval_loss)) summary.first_eval_loss = r.loss;
    summary.final_eval_loss = r.loss;
  };
  if (!ckpt) run_eval(0);

  tm.model->train();
  memory.reset_peak();  // peaks of the training steps, not of loading or the first evaluation
  Stopwatch run_clock;
  double last_wait = loader.waited_seconds();
  set_stop_honoured(true);
  bool stop = false;
  for (std::int64_t step = start_step; step < total_steps && !stop; ++step) {
    Stopwatch step_clock;
    data::StepData data = loader.next();
    position = data.next_state;
    const double data_wait = loader.waited_seconds() - last_wait;
    last_wait = loader.waited_seconds();

    // Normalizer: target tokens of this optimizer step over all micro-batches and ranks.
    std::int64_t local_tokens = 0, local_samples = 0, local_seen = 0;
    for (const auto& b : data.micro_batches) {
      local_tokens += b.num_target_tokens;
      local_samples += b.num_samples;
      local_seen += b.num_tokens;
    }
    const std::vector<double> counts = dist::all_reduce_values(
        comm, {static_cast<double>(local_tokens), static_cast<double>(local_samples), static_cast<double>(local_seen)},
        dist::ReduceOp::kSum);
    const double step_tokens = counts[0];
    // Held before any activation exists: model and optimizer state, prefetched batches. (After
    // the step a backend may still hold its last collective's staging buffers.)
    const std::int64_t held_at_step_start = memory.allocated_bytes();

    Stopwatch compute_clock;
    // Summed where the loss is (on a GPU: no host synchronisation inside the micro-batch loop, the
    // batches arrive in pinned memory and copy asynchronously); read once, after the loop.
    torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kDouble).device(device));
    for (std::size_t m = 0; m < data.micro_batches.size(); ++m) {
      const data::Batch& b = data.micro_batches[m];
      strategy->before_backward(m + 1 == data.micro_batches.size());
      strategy->before_forward();
      model::ForwardOptions options;
      options.layer_runner = hooks.layer_runner;
      options.position_ids = b.position_ids.to(device, /*non_blocking=*/true);
      if (b.packed) options.segment_ids = b.segment_ids.to(device, /*non_blocking=*/true);
      model::LossSum loss = model::model_loss(tm.model, b.input_ids.to(device, /*non_blocking=*/true),
                                              b.labels.to(device, /*non_blocking=*/true), options,
                                              c.train.loss_chunk_tokens);
      if (fault_value("loss.nan")) loss.sum = loss.sum * std::numeric_limits<double>::quiet_NaN();
      const double multiplier = scale_loss ? scaler.scale() / step_tokens : 1.0 / step_tokens;
      (loss.sum * multiplier).backward();
      loss_sum += loss.sum.detach();
    }
    strategy->finish_gradients();
    const double compute_s = compute_clock.seconds();

    // The step's loss, and whether any rank got a stop signal: all ranks then stop after this step.
    const torch::Tensor stop_flag = torch::full({1}, stop_requested() ? 1.0 : 0.0, loss_sum.options());
    const std::vector<double> reduced =
        dist::all_reduce_to_host(comm, torch::cat({loss_sum.reshape({1}), stop_flag}), dist::ReduceOp::kSum);
    const double loss = reduced[0] / step_tokens;
    stop = reduced[1] > 0;
    const double loss_scale = scale_loss ? scaler.scale() : 1.0;
    const double grad_norm = std::sqrt(strategy->grad_sum_of_squares()) / loss_scale;
    const double lr = schedule.lr(step);
    const bool loss_finite = std::isfinite(loss), grads_finite = std::isfinite(grad_norm);
    bool skipped = false;
    if (scale_loss && loss_finite && !grads_finite) {
      // Overflow at this loss scale: skipped on every rank alike and the scale lowered; not an error.
      scaler.update(true);
      strategy->skip_step();
      skipped = true;
      ++overflow_steps;
      log::info("step ", step + 1, ": gradient overflow at loss scale ", loss_scale, "; step skipped, scale now ",
                scaler.scale());
    } else if (loss_finite && grads_finite && c.train.skip_spikes && spike_guard.is_spike(loss, grad_norm)) {
      // Every rank sees the same loss and norm (all-reduced), so every rank skips alike.
      if (scale_loss) scaler.update(false);
      strategy->skip_step();
      skipped = true;
      ++spike_steps;
      log::warn("step ", step + 1, ": loss ", loss, " or gradient norm ", grad_norm, " is more than ",
                c.train.spike_sigma, " standard deviations above the last steps'; step skipped (train.skip_spikes)");
    } else if (loss_finite && grads_finite) {
      if (scale_loss) scaler.update(false);
      strategy->step(lr, optim::clip_coefficient(grad_norm, c.train.grad_clip) / loss_scale);
    } else {
      FT_CHECK(c.train.on_nonfinite == "skip", "step ", step + 1, ": the ", loss_finite ? "gradient norm" : "loss",
               " is ", loss_finite ? grad_norm : loss,
               "; stopping before it reaches the weights (train.on_nonfinite = \"skip\" skips such steps; a lower "
               "train.lr or train.grad_clip may help)");
      strategy->skip_step();
      skipped = true;
      ++summary.skipped_steps;
      log::warn("step ", step + 1, ": non-finite loss or gradient norm, step skipped");
    }
    const parallel::StepTimes times = strategy->take_step_times();
    const double step_s = step_clock.seconds();
    summary.steps = step + 1;
    summary.final_loss = loss;

    if ((step + 1) % c.log.every_steps == 0 || step + 1 == total_steps) {
      Json record = {{"step", step + 1},
                     {"epoch", data.epoch_progress},
                     {"loss", loss},
                     {"lr", lr},
                     {"grad_norm", grad_norm},
                     {"tokens_per_s", counts[2] / step_s},
                     {"samples_per_s", counts[1] / step_s},
                     {"target_tokens", static_cast<std::int64_t>(step_tokens)},
                     {"time", {{"step", step_s},
                               {"data_wait", data_wait},
                               {"compute", compute_s - times.communication},
                               {"communication", times.communication},
                               {"optimizer", times.optimizer}}},
                     {"comm_bytes", times.bytes_reduced},
                     {"peak_rss_bytes", peak_rss_bytes()},
                     {"skipped", skipped}};
      add_rank_resources(record, comm, held_at_step_start, memory, gpu.get(), throttle_warner);
      if (scale_loss) record["loss_scale"] = loss_scale;
      if (c.train.skip_spikes) record["spike_steps"] = spike_steps;
      metrics.write(record);
      progress.update(step + 1, loss, counts[2] / step_s, run_clock.seconds());
    }
    if (c.log.eval_every_steps > 0 && (step + 1) % c.log.eval_every_steps == 0 && step + 1 < total_steps)
      run_eval(step + 1);
    last_lr = lr;
    const bool periodic = c.checkpoint.every_steps > 0 && (step + 1) % c.checkpoint.every_steps == 0;
    if (periodic || (step + 1 == total_steps && c.checkpoint.save_at_end) || stop) {
      const double seconds = save(step + 1);
      metrics.write(Json{{"step", step + 1}, {"checkpoint_s", seconds}});
    }
    fault_point("step.done");
  }
  set_stop_honoured(false);
  progress.finish();
  summary.seconds = run_clock.seconds();
  if (stop) {
    summary.stopped_by_signal = true;
    log::info("stopped by a signal after step ", summary.steps, " of ", total_steps,
              "; the checkpoint is saved: run the same command again to continue");
    return summary;
  }
  if (start_step == total_steps && total_steps > 0 && root)
    log::info("the checkpoint is at the last step: evaluating and writing the results again");
  run_eval(total_steps);

  if (c.checkpoint.save_at_end) {
    save_result(c, tm, *strategy, comm, tokenizer);
  } else if (root) {
    log::info("checkpoint.save_at_end is false: the ", c.lora ? "adapter" : "model",
              " is not written, nor a checkpoint of the last step beyond a periodic one");
  }
  comm.barrier();
  log::info("done: ", summary.steps, " steps in ", summary.seconds, " s; final loss ", summary.final_loss,
            std::isnan(summary.final_eval_loss) ? std::string() : str(", eval loss ", summary.first_eval_loss, " -> ",
                                                                       summary.final_eval_loss));
  return summary;
}

}  // namespace ft::train
