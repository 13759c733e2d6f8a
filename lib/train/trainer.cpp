#include "train/trainer.h"

#include <torch/torch.h>

#include <cmath>
#include <thread>

#include "data/data_loader.h"
#include "data/prepared_data.h"
#include "data/tokenizer.h"
#include "io/dtype.h"
#include "model/causal_lm_loss.h"
#include "model/model_loader.h"
#include "optim/grad_clip.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "parallel/parallel_strategy.h"
#include "train/evaluator.h"
#include "train/metrics_log.h"
#include "train/model_setup.h"
#include "train/progress.h"
#include "util/cpu_threads.h"
#include "util/error.h"
#include "util/file_util.h"
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

// Config keys whose machinery has not landed yet: refuse them up front instead of silently
// training without them.
void check_supported(const config::RunConfig& c) {
  FT_CHECK(c.model.quantize == "none", "model.quantize \"", c.model.quantize,
           "\" is not implemented in this build yet (use \"none\")");
  FT_CHECK(c.checkpoint.every_steps == 0,
           "checkpoint.every_steps is not implemented in this build yet (set it to 0: the result is written at the end)");
}

}  // namespace

TrainSummary run_training(const config::RunConfig& c, dist::Communicator& comm, c10::Device device) {
  check_supported(c);
  const bool root = comm.is_root();
  configure_cpu_threads(threads_per_rank(c));
  // Dropout masks come from LibTorch's default generator: seeded from train.seed so a run repeats
  // exactly, and per rank so ranks do not drop the same positions of different samples.
  at::manual_seed(c.train.seed + static_cast<std::uint64_t>(comm.rank()));
  if (root) {
    make_directories(c.run_dir);
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
  auto strategy = parallel::make_strategy(c, comm, device);
  strategy->setup(tm.trainable);
  // What the strategy did not place (FSDP's model loads on the host: frozen weights); parameters
  // already on the device are left alone.
  if (!device.is_cpu()) tm.model->to(device);
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
  data::TrainDataLoader loader(train_file, lo, comm.rank(), static_cast<int>(world));
  const std::int64_t total_steps = c.train.max_steps > 0 ? c.train.max_steps : c.train.epochs * loader.steps_per_epoch();
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

  MetricsLog metrics(join_path(c.run_dir, "metrics.jsonl"), root);
  Progress progress(total_steps, root);
  TrainSummary summary;
  summary.first_eval_loss = summary.final_eval_loss = NAN;
  auto run_eval = [&](std::int64_t step) {
    if (!eval_file) return;
    EvalResult r =
        evaluate(tm.model, *eval_file, c.train.micro_batch_size, c.data.max_seq_len, c.data.packing, comm, hooks);
    metrics.write(eval_record(step, r));
    progress.print(str("step ", step, ": eval loss ", r.loss, ", perplexity ", r.perplexity));
    if (std::isnan(summary.first_eval_loss)) summary.first_eval_loss = r.loss;
    summary.final_eval_loss = r.loss;
  };
  run_eval(0);

  tm.model->train();
  Stopwatch run_clock;
  double last_wait = loader.waited_seconds();
  for (std::int64_t step = 0; step < total_steps; ++step) {
    Stopwatch step_clock;
    data::StepData data = loader.next();
    const double data_wait = loader.waited_seconds() - last_wait;
    last_wait = loader.waited_seconds();

    // Normalizer: target tokens of this optimizer step over all micro-batches and ranks.
    std::int64_t local_tokens = 0, local_samples = 0, local_seen = 0;
    for (const auto& b : data.micro_batches) {
      local_tokens += b.num_target_tokens;
      local_samples += b.num_samples;
      local_seen += b.num_tokens;
    }
    auto counts = torch::tensor({static_cast<double>(local_tokens), static_cast<double>(local_samples),
                                 static_cast<double>(local_seen)}, torch::kDouble);
    comm.all_reduce(counts, dist::ReduceOp::kSum)->wait();
    const double step_tokens = counts[0].item<double>();

    Stopwatch compute_clock;
    double loss_sum = 0;
    for (std::size_t m = 0; m < data.micro_batches.size(); ++m) {
      const data::Batch& b = data.micro_batches[m];
      strategy->before_backward(m + 1 == data.micro_batches.size());
      strategy->before_forward();
      model::ForwardOptions options;
      options.layer_runner = hooks.layer_runner;
      options.position_ids = b.position_ids.to(device);
      options.segment_ids = b.segment_ids.to(device);
      model::LossSum loss = model::causal_lm_loss(tm.model(b.input_ids.to(device), options), b.labels.to(device));
      const double multiplier = scale_loss ? scaler.scale() / step_tokens : 1.0 / step_tokens;
      (loss.sum * multiplier).backward();
      loss_sum += loss.sum.item<double>();
    }
    strategy->finish_gradients();
    const double compute_s = compute_clock.seconds();

    const double loss = dist::all_reduce_scalar(comm, loss_sum, dist::ReduceOp::kSum) / step_tokens;
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
                     {"tokens_per_s", counts[2].item<double>() / step_s},
                     {"samples_per_s", counts[1].item<double>() / step_s},
                     {"target_tokens", static_cast<std::int64_t>(step_tokens)},
                     {"time", {{"step", step_s},
                               {"data_wait", data_wait},
                               {"compute", compute_s - times.communication},
                               {"communication", times.communication},
                               {"optimizer", times.optimizer}}},
                     {"comm_bytes", times.bytes_reduced},
                     {"peak_memory_bytes", peak_rss_bytes()},
                     {"skipped", skipped}};
      if (scale_loss) record["loss_scale"] = loss_scale;
      metrics.write(record);
      progress.update(step + 1, loss, counts[2].item<double>() / step_s, run_clock.seconds());
    }
    if (c.log.eval_every_steps > 0 && (step + 1) % c.log.eval_every_steps == 0 && step + 1 < total_steps)
      run_eval(step + 1);
  }
  run_eval(total_steps);
  progress.finish();
  summary.seconds = run_clock.seconds();

  save_result(c, tm, *strategy, comm, tokenizer);
  comm.barrier();
  log::info("done: ", summary.steps, " steps in ", summary.seconds, " s; final loss ", summary.final_loss,
            std::isnan(summary.final_eval_loss) ? std::string() : str(", eval loss ", summary.first_eval_loss, " -> ",
                                                                       summary.final_eval_loss));
  return summary;
}

}  // namespace ft::train
