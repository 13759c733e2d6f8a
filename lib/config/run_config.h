// The run config (docs/config.md) as plain structs: one JSON file = one run. Every key is
// declared once, in run_config.cpp's table: its type, default, range, description and the member
// it lands in. From that table come the validation (every problem at once), the defaults, the
// resolved JSON written to RUN_DIR/config.json, and docs/config.md's key table (a test compares
// them). The member initializers below repeat the declared defaults for code that builds a
// RunConfig by hand; a test checks that they agree. Choices are enums (config/choices.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/choices.h"
#include "config/schema.h"
#include "util/json.h"

namespace ft::config {

struct ModelConfig {
  std::string path;              // HF model folder
  WeightDtype dtype = WeightDtype::kAuto;  // the weights' dtype; must equal train.precision
  Quantization quantize = Quantization::kNone;  // LoRA only
  std::string attention = "auto";  // auto|sdpa|eager: the attention kernel (model/attention.h)
};

struct DataConfig {
  std::string train;                 // dataset file (JSON array or JSONL)
  std::string eval;                  // optional; "" = no evaluation set
  RecordFormat format = RecordFormat::kAlpaca;
  std::int64_t max_seq_len = 512;
  bool packing = false;              // concatenate samples up to max_seq_len
  Json template_spec = "auto";       // built-in template name or a template object
  bool train_on_prompt = false;      // false: prompt tokens get label -100
  TooLong too_long = TooLong::kTruncate;  // samples longer than max_seq_len
  OnBadRecord on_bad_record = OnBadRecord::kError;
  std::int64_t max_bad_records = 100;   // with skip: more than this is still an error
  std::string cache_dir;             // token files; "" = RUN_DIR/tokens
  std::int64_t prefetch = 2;         // batches prepared ahead by the background thread
  std::int64_t num_workers = 0;      // tokenization threads; 0 = every core
  bool shuffle = true;
};

struct LoraConfig {
  std::int64_t r = 8;
  double alpha = 16;
  double dropout = 0.05;
  std::vector<std::string> target_modules{"q_proj", "v_proj"};  // or {"all-linear"}
  bool use_rslora = false;
  std::string init_from;  // adapter folder to continue training from; "" = fresh
};

struct ParallelConfig {
  Strategy strategy = Strategy::kDdp;
  Backend backend = Backend::kAuto;
  double bucket_mb = 25;
  Precision grad_comm_dtype = Precision::kFp32;  // the dtype gradients travel in
  bool offload_optimizer = false;
  bool overlap_grad_reduce = true;  // false: all buckets after backward (for measuring the overlap)
  std::int64_t fsdp_prefetch = 1;   // FSDP: layer units whose gathers are issued ahead of their use
  bool fsdp_reshard_after_forward = true;  // FSDP: free each layer after its forward (false: keep it to its backward)
  double timeout_s = 300;
};

struct TrainConfig {
  std::int64_t global_batch_size = 0;  // sequences per optimizer step, over all ranks
  std::int64_t micro_batch_size = 1;   // sequences per forward/backward on one rank
  std::int64_t epochs = 1;
  std::int64_t max_steps = 0;          // > 0: stop after this many optimizer steps
  double lr = 0;
  LrSchedule lr_schedule = LrSchedule::kCosine;
  std::int64_t warmup_steps = 0;
  double min_lr_ratio = 0.0;           // linear/cosine decay to lr * min_lr_ratio
  double weight_decay = 0.0;
  bool weight_decay_norms = false;     // decay norm weights (1-D parameters) too; off as in HF Trainer
  double adam_beta1 = 0.9, adam_beta2 = 0.999, adam_eps = 1e-8;
  double grad_clip = 1.0;              // max global gradient norm; 0 = off
  std::uint64_t seed = 42;
  Precision precision = Precision::kFp32;  // compute dtype
  LossScaling loss_scale = LossScaling::kAuto;  // dynamic loss scaling (auto: fp16 only)
  double loss_scale_init = 65536.0;    // GradScaler's init_scale
  std::int64_t loss_scale_growth_interval = 2000;  // GradScaler's growth_interval
  bool activation_checkpointing = false;
  bool offload_activations = false;  // checkpointed layers' inputs in (pinned) host memory
  bool offload_prefetch = true;      // ... copied back one layer ahead, on a side stream
  // > 0: the output head and cross-entropy run over chunks of this many target tokens, never the
  // whole sequence's logits (model::chunked_causal_lm_loss); 0: full logits.
  std::int64_t loss_chunk_tokens = 1024;
  OnNonfinite on_nonfinite = OnNonfinite::kStop;  // a step whose loss or gradient is NaN/Inf
  bool skip_spikes = false;            // skip loss/gradient-norm spikes (optim/spike_guard.h)
  std::int64_t spike_window = 128;
  double spike_sigma = 6.0;
  std::int64_t threads = 0;            // CPU threads per rank; 0 = cores / local ranks
};

struct CheckpointConfig {
  std::int64_t every_steps = 0;  // 0 = only at the end
  std::int64_t keep_last = 2;
  ResumeMode resume = ResumeMode::kAuto;
  bool save_at_end = true;       // false: no last-step checkpoint, no adapter/ or model/
  bool async = false;            // write checkpoints in the background (host copies while saving)
};

struct LogConfig {
  std::int64_t every_steps = 1;
  std::int64_t eval_every_steps = 0;  // 0 = evaluate at the end only
};

struct RunConfig {
  std::string run_dir;
  ModelConfig model;
  DataConfig data;
  std::optional<LoraConfig> lora;  // absent = full fine-tune
  ParallelConfig parallel;
  TrainConfig train;
  CheckpointConfig checkpoint;
  LogConfig log;
  Json resolved;  // every key as the run uses it
  std::string source;  // the config file
};

const Schema& run_config_schema();

// docs/config.md's key table (markdown, one row per key) as the declaration gives it.
std::string config_key_table();

// Every declared default, as the member initializers of a default-constructed RunConfig hold it
// (for the test that the two agree): key path -> the value read back from RunConfig{}.
Json default_struct_values();

// Whether train.loss_scale turns dynamic loss scaling on for this precision.
bool uses_loss_scaling(const TrainConfig& train);

// Reads `path`, applies `overrides` ("key.path=value", in order), validates and resolves.
RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides = {});
// The same from an already parsed JSON document; `source` names it in errors.
RunConfig parse_run_config(Json config, const std::string& source, const std::vector<std::string>& overrides = {});

// Optimizer-step arithmetic: global = micro x world x accumulation. Throws ft::Error saying
// which global batch sizes (or micro-batch sizes) would work when it does not divide.
std::int64_t gradient_accumulation_steps(std::int64_t global_batch, std::int64_t micro_batch, std::int64_t world_size);

// FNV-1a of the resolved config's canonical text: ranks compare it to be sure they run the same.
std::string config_hash(const Json& resolved);

}  // namespace ft::config
