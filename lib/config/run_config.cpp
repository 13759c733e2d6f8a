#include "config/run_config.h"

#include <numeric>

#include "util/error.h"
#include "util/hash.h"

namespace ft::config {
namespace {

KeySpec key(std::string path, Kind kind, std::optional<Json> def, std::string doc) {
  KeySpec k;
  k.path = std::move(path);
  k.kind = kind;
  k.default_value = std::move(def);
  k.doc = std::move(doc);
  return k;
}
KeySpec choice(std::string path, std::vector<std::string> choices, std::string def, std::string doc) {
  KeySpec k = key(std::move(path), Kind::kString, Json(def), std::move(doc));
  k.choices = std::move(choices);
  return k;
}
KeySpec ranged(KeySpec k, std::optional<double> min, std::optional<double> max, bool min_exclusive = false) {
  k.min = min;
  k.max = max;
  k.min_exclusive = min_exclusive;
  return k;
}
KeySpec aka(KeySpec k, std::vector<std::string> aliases) {
  k.aliases = std::move(aliases);
  return k;
}

constexpr auto kStr = Kind::kString;
constexpr auto kInt = Kind::kInteger;
constexpr auto kNum = Kind::kNumber;
constexpr auto kBool = Kind::kBool;
const std::optional<Json> kRequired = std::nullopt;

Schema make_schema() {
  std::vector<KeySpec> keys = {
      key("run_dir", kStr, kRequired, "the run folder: config.json, metrics.jsonl, adapter/, model/, checkpoints/"),
      key("model.path", kStr, kRequired, "Hugging Face model folder"),
      choice("model.dtype", {"auto", "fp32", "bf16", "fp16"}, "auto",
             "dtype the base weights are held in; auto = train.precision"),
      choice("model.quantize", {"none", "int8", "nf4"}, "none", "quantized frozen base (LoRA only)"),
      choice("model.attention", {"auto", "sdpa", "eager"}, "auto",
             "attention kernel: sdpa (fused, LibTorch 2.x), eager (scores materialized); auto = sdpa where available"),
      key("data.train", kStr, kRequired, "training dataset, JSON array or JSONL"),
      key("data.eval", kStr, Json(""), "evaluation dataset; empty = none"),
      choice("data.format", {"alpaca", "prompt_completion", "text", "chat", "sharegpt"}, "alpaca", "record format"),
      ranged(key("data.max_seq_len", kInt, Json(512), "tokens per sequence at most"), 1, std::nullopt),
      key("data.packing", kBool, Json(false), "concatenate samples up to max_seq_len"),
      key("data.template", Kind::kStringOrObject, Json("auto"), "prompt template: a built-in name or an object"),
      key("data.train_on_prompt", kBool, Json(false), "also train on prompt tokens"),
      choice("data.too_long", {"truncate", "drop"}, "truncate", "what to do with samples over max_seq_len"),
      choice("data.on_bad_record", {"error", "skip"}, "error", "what to do with a malformed record"),
      ranged(key("data.max_bad_records", kInt, Json(100), "skipped records allowed before it is an error"), 0, std::nullopt),
      key("data.cache_dir", kStr, Json(""), "where token files go; empty = RUN_DIR/tokens"),
      ranged(key("data.prefetch", kInt, Json(2), "batches prepared ahead"), 0, 64),
      ranged(key("data.num_workers", kInt, Json(0), "tokenization threads; 0 = every core"), 0, 1024),
      key("data.shuffle", kBool, Json(true), "reshuffle the training set every epoch"),
      ranged(key("lora.r", kInt, Json(8), "adapter rank"), 1, 4096),
      ranged(aka(key("lora.alpha", kNum, Json(16), "adapter scale numerator"), {"lora_alpha"}), 0, std::nullopt, true),
      ranged(aka(key("lora.dropout", kNum, Json(0.05), "dropout on the adapter branch"), {"lora_dropout"}), 0, 0.999),
      [] {
        KeySpec k = key("lora.target_modules", Kind::kStringOrStringList, Json({"q_proj", "v_proj"}),
                        "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, or \"all-linear\"");
        k.choices = {"all-linear"};
        return k;
      }(),
      key("lora.use_rslora", kBool, Json(false), "scale alpha/sqrt(r) instead of alpha/r"),
      key("lora.init_from", kStr, Json(""), "adapter folder to continue from"),
      choice("parallel.strategy", {"ddp", "zero1", "zero2", "fsdp"}, "ddp", "data-parallel strategy"),
      choice("parallel.backend", {"auto", "gloo", "nccl"}, "auto", "communication backend"),
      ranged(key("parallel.bucket_mb", kNum, Json(25), "gradient bucket size in MiB"), 0, std::nullopt, true),
      choice("parallel.grad_comm_dtype", {"fp32", "bf16", "fp16"}, "fp32", "dtype gradients travel in"),
      key("parallel.offload_optimizer", kBool, Json(false), "keep optimizer state in host memory"),
      key("parallel.overlap_grad_reduce", kBool, Json(true), "reduce gradient buckets during backward"),
      ranged(key("parallel.timeout_s", kNum, Json(300), "seconds before a collective or rendezvous fails"), 0,
             std::nullopt, true),
      ranged(aka(key("train.global_batch_size", kInt, kRequired, "sequences per optimizer step over all ranks"),
                 {"batch_size", "global_batch", "train_batch_size"}),
             1, std::nullopt),
      ranged(aka(key("train.micro_batch_size", kInt, Json(1), "sequences per forward/backward on one rank"),
                 {"per_device_train_batch_size", "micro_batch"}),
             1, std::nullopt),
      ranged(aka(key("train.epochs", kInt, Json(1), "passes over the training set"), {"num_epochs", "num_train_epochs"}),
             1, std::nullopt),
      ranged(key("train.max_steps", kInt, Json(0), "optimizer steps at most; 0 = run the epochs"), 0, std::nullopt),
      ranged(key("train.lr", kNum, kRequired, "peak learning rate"), 0, std::nullopt, true),
      choice("train.lr_schedule", {"constant", "linear", "cosine"}, "cosine", "learning-rate schedule after warmup"),
      ranged(key("train.warmup_steps", kInt, Json(0), "linear warmup steps"), 0, std::nullopt),
      ranged(key("train.min_lr_ratio", kNum, Json(0.0), "final lr as a fraction of lr"), 0, 1),
      ranged(key("train.weight_decay", kNum, Json(0.0), "decoupled (AdamW) weight decay"), 0, std::nullopt),
      key("train.weight_decay_norms", kBool, Json(false), "weight decay on norm weights (1-D parameters) too"),
      ranged(key("train.adam_beta1", kNum, Json(0.9), "AdamW beta1"), 0, 0.999999),
      ranged(key("train.adam_beta2", kNum, Json(0.999), "AdamW beta2"), 0, 0.999999),
      ranged(key("train.adam_eps", kNum, Json(1e-8), "AdamW epsilon"), 0, std::nullopt, true),
      ranged(aka(key("train.grad_clip", kNum, Json(1.0), "max global gradient norm; 0 = off"), {"max_grad_norm"}), 0,
             std::nullopt),
      ranged(key("train.seed", kInt, Json(42), "seed for initialization, dropout and shuffling"), 0, std::nullopt),
      choice("train.precision", {"fp32", "bf16", "fp16"}, "fp32", "compute dtype"),
      choice("train.loss_scale", {"auto", "dynamic", "none"}, "auto",
             "dynamic loss scaling; auto = on for fp16 only"),
      ranged(key("train.loss_scale_init", kNum, Json(65536.0), "first dynamic loss scale"), 1, 3.4e38),
      ranged(key("train.loss_scale_growth_interval", kInt, Json(2000), "good steps before the loss scale doubles"), 1,
             std::nullopt),
      key("train.activation_checkpointing", kBool, Json(false), "recompute each decoder layer in backward"),
      ranged(key("train.loss_chunk_tokens", kInt, Json(1024),
                 "target tokens per chunk of the output head and cross-entropy; 0 = full logits"),
             0, std::nullopt),
      choice("train.on_nonfinite", {"stop", "skip"}, "stop", "a NaN/Inf loss or gradient stops the run or skips the step"),
      key("train.skip_spikes", kBool, Json(false),
          "skip a step whose loss or gradient norm is spike_sigma standard deviations above the last spike_window steps' mean"),
      ranged(key("train.spike_window", kInt, Json(128), "steps of history for train.skip_spikes"), 2, std::nullopt),
      ranged(key("train.spike_sigma", kNum, Json(6.0), "standard deviations that make a spike"), 0, std::nullopt, true),
      ranged(key("train.threads", kInt, Json(0), "CPU threads per rank; 0 = cores / local ranks"), 0, 1024),
      ranged(key("checkpoint.every_steps", kInt, Json(0), "save every N steps; 0 = at the end only"), 0, std::nullopt),
      ranged(key("checkpoint.keep_last", kInt, Json(2), "checkpoints kept"), 1, std::nullopt),
      choice("checkpoint.resume", {"auto", "none"}, "auto", "continue from checkpoints/latest when present"),
      key("checkpoint.save_at_end", kBool, Json(true),
          "write the last step's checkpoint and the adapter or model; false for throwaway runs (ft_bench)"),
      ranged(key("log.every_steps", kInt, Json(1), "metrics line every N steps"), 1, std::nullopt),
      ranged(key("log.eval_every_steps", kInt, Json(0), "evaluate every N steps; 0 = at the end only"), 0,
             std::nullopt),
  };
  return Schema(std::move(keys), {"lora"});
}

}  // namespace

const Schema& run_config_schema() {
  static const Schema schema = make_schema();
  return schema;
}

RunConfig parse_run_config(Json config, const std::string& source, const std::vector<std::string>& overrides) {
  const Schema& schema = run_config_schema();
  for (const auto& o : overrides) schema.apply_override(config, o);
  Json r = schema.resolve(config, source);

  RunConfig c;
  c.source = source;
  c.resolved = r;
  c.run_dir = r["run_dir"];
  const Json& m = r["model"];
  c.model.path = m["path"];
  c.model.dtype = m["dtype"];
  c.model.quantize = m["quantize"];
  c.model.attention = m["attention"];
  const Json& d = r["data"];
  c.data.train = d["train"];
  c.data.eval = d["eval"];
  c.data.format = d["format"];
  c.data.max_seq_len = d["max_seq_len"];
  c.data.packing = d["packing"];
  c.data.template_spec = d["template"];
  c.data.train_on_prompt = d["train_on_prompt"];
  c.data.too_long = d["too_long"];
  c.data.on_bad_record = d["on_bad_record"];
  c.data.max_bad_records = d["max_bad_records"];
  c.data.cache_dir = d["cache_dir"];
  c.data.prefetch = d["prefetch"];
  c.data.num_workers = d["num_workers"];
  c.data.shuffle = d["shuffle"];
  if (r.contains("lora")) {
    const Json& l = r["lora"];
    LoraConfig lora;
    lora.r = l["r"];
    lora.alpha = l["alpha"];
    lora.dropout = l["dropout"];
    lora.target_modules = l["target_modules"].is_string() ? std::vector<std::string>{l["target_modules"]}
                                                           : l["target_modules"].get<std::vector<std::string>>();
    lora.use_rslora = l["use_rslora"];
    lora.init_from = l["init_from"];
    c.lora = lora;
  }
  const Json& p = r["parallel"];
  c.parallel.strategy = p["strategy"];
  c.parallel.backend = p["backend"];
  c.parallel.bucket_mb = p["bucket_mb"];
  c.parallel.grad_comm_dtype = p["grad_comm_dtype"];
  c.parallel.offload_optimizer = p["offload_optimizer"];
  c.parallel.overlap_grad_reduce = p["overlap_grad_reduce"];
  c.parallel.timeout_s = p["timeout_s"];
  const Json& t = r["train"];
  c.train.global_batch_size = t["global_batch_size"];
  c.train.micro_batch_size = t["micro_batch_size"];
  c.train.epochs = t["epochs"];
  c.train.max_steps = t["max_steps"];
  c.train.lr = t["lr"];
  c.train.lr_schedule = t["lr_schedule"];
  c.train.warmup_steps = t["warmup_steps"];
  c.train.min_lr_ratio = t["min_lr_ratio"];
  c.train.weight_decay = t["weight_decay"];
  c.train.weight_decay_norms = t["weight_decay_norms"];
  c.train.adam_beta1 = t["adam_beta1"];
  c.train.adam_beta2 = t["adam_beta2"];
  c.train.adam_eps = t["adam_eps"];
  c.train.grad_clip = t["grad_clip"];
  c.train.seed = t["seed"];
  c.train.precision = t["precision"];
  c.train.loss_scale = t["loss_scale"];
  c.train.loss_scale_init = t["loss_scale_init"];
  c.train.loss_scale_growth_interval = t["loss_scale_growth_interval"];
  c.train.activation_checkpointing = t["activation_checkpointing"];
  c.train.loss_chunk_tokens = t["loss_chunk_tokens"];
  c.train.on_nonfinite = t["on_nonfinite"];
  c.train.skip_spikes = t["skip_spikes"];
  c.train.spike_window = t["spike_window"];
  c.train.spike_sigma = t["spike_sigma"];
  c.train.threads = t["threads"];
  const Json& k = r["checkpoint"];
  c.checkpoint.every_steps = k["every_steps"];
  c.checkpoint.keep_last = k["keep_last"];
  c.checkpoint.resume = k["resume"];
  c.checkpoint.save_at_end = k["save_at_end"];
  const Json& g = r["log"];
  c.log.every_steps = g["every_steps"];
  c.log.eval_every_steps = g["eval_every_steps"];

  // Rules that involve more than one key.
  std::vector<std::string> errors;
  if (c.lora) {
    static const std::vector<std::string> kModules = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                      "gate_proj", "up_proj", "down_proj", "all-linear"};
    for (const auto& name : c.lora->target_modules)
      if (std::find(kModules.begin(), kModules.end(), name) == kModules.end())
        errors.push_back(str("lora.target_modules: unknown module \"", name,
                             "\" (expected q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj or all-linear)"));
    if (c.lora->target_modules.empty()) errors.push_back("lora.target_modules: expected at least one module");
  } else if (c.model.quantize != "none") {
    errors.push_back("model.quantize: a quantized base needs a lora section (the base stays frozen)");
  }
  if (c.model.dtype != "auto" && c.model.dtype != c.train.precision)
    errors.push_back(str("model.dtype: \"", c.model.dtype, "\" differs from train.precision \"", c.train.precision,
                         "\"; the weights compute in train.precision (leave model.dtype at \"auto\")"));
  if (c.train.micro_batch_size > c.train.global_batch_size)
    errors.push_back(str("train.micro_batch_size: ", c.train.micro_batch_size, " is larger than train.global_batch_size ",
                         c.train.global_batch_size));
  if (!errors.empty()) {
    std::string message = str(source, ": ", errors.size(), errors.size() == 1 ? " error" : " errors", " in the config:");
    for (const auto& e : errors) message += "\n  " + e;
    throw Error(message);
  }
  return c;
}

RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides) {
  return parse_run_config(parse_json_file(path, 16), path, overrides);
}

std::int64_t gradient_accumulation_steps(std::int64_t global_batch, std::int64_t micro_batch, std::int64_t world_size) {
  FT_CHECK(global_batch > 0 && micro_batch > 0 && world_size > 0, "batch sizes and world size must be positive");
  const std::int64_t per_step = micro_batch * world_size;
  if (global_batch % per_step == 0) return global_batch / per_step;
  // Say which nearby global batches divide, and which micro-batches fit this global batch.
  const std::int64_t lower = global_batch / per_step * per_step;
  const std::int64_t upper = lower + per_step;
  std::string micro_options;
  for (std::int64_t m = 1; m <= global_batch / world_size; ++m)
    if (global_batch % (m * world_size) == 0) micro_options += (micro_options.empty() ? "" : ", ") + std::to_string(m);
  FT_CHECK(false, "train.global_batch_size ", global_batch, " is not a multiple of train.micro_batch_size ", micro_batch,
           " x ", world_size, " ranks = ", per_step, ": use a global batch of ",
           lower > 0 ? std::to_string(lower) + " or " : std::string(), upper,
           micro_options.empty() ? std::string(" (no micro-batch size divides ") + std::to_string(global_batch) + " over " +
                                       std::to_string(world_size) + " ranks)"
                                 : ", or a micro-batch of " + micro_options);
  return 0;
}

std::string config_hash(const Json& resolved) {
  const std::string text = resolved.dump();
  return to_hex(fnv1a64(text.data(), text.size()));
}

}  // namespace ft::config
