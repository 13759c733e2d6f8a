#include "config/run_config.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <type_traits>

#include "util/error.h"
#include "util/hash.h"

namespace ft::config {
namespace {

constexpr auto kStr = Kind::kString;
constexpr auto kInt = Kind::kInteger;
constexpr auto kNum = Kind::kNumber;
constexpr auto kBool = Kind::kBool;
const std::optional<Json> kRequired = std::nullopt;

// A member's value from its resolved JSON, and back.
template <class T>
T from_json(const Json& v, const std::string&) {
  return v.get<T>();
}
template <>
std::vector<std::string> from_json<std::vector<std::string>>(const Json& v, const std::string&) {
  return v.is_string() ? std::vector<std::string>{v.get<std::string>()} : v.get<std::vector<std::string>>();
}
template <class T>
Json to_json(const T& value) {
  if constexpr (std::is_enum_v<T>) {
    return Json(choice_name(value));
  } else {
    return Json(value);
  }
}

// One config key: its declaration (type, default, range, doc) and where it lands in RunConfig.
struct KeyDecl {
  KeySpec spec;
  std::function<void(const Json&, RunConfig&)> store;  // resolved value -> member
  std::function<Json(RunConfig&)> load;                 // member -> JSON
};

template <class S>
using SectionOf = S& (*)(RunConfig&);
RunConfig& top(RunConfig& c) { return c; }
ModelConfig& model_section(RunConfig& c) { return c.model; }
DataConfig& data_section(RunConfig& c) { return c.data; }
LoraConfig& lora_section(RunConfig& c) {
  if (!c.lora) c.lora.emplace();
  return *c.lora;
}
ParallelConfig& parallel_section(RunConfig& c) { return c.parallel; }
TrainConfig& train_section(RunConfig& c) { return c.train; }
CheckpointConfig& checkpoint_section(RunConfig& c) { return c.checkpoint; }
LogConfig& log_section(RunConfig& c) { return c.log; }

// The declaration of `path` (of kind `kind`, `def`ault or kRequired) stored in section.*member.
template <class S, class T>
KeyDecl key(std::string path, SectionOf<S> section, T S::*member, Kind kind, std::optional<Json> def, std::string doc) {
  KeyDecl d;
  d.spec.path = std::move(path);
  d.spec.kind = kind;
  d.spec.default_value = std::move(def);
  d.spec.doc = std::move(doc);
  const std::string where = d.spec.path;
  d.store = [section, member, where](const Json& v, RunConfig& c) { section(c).*member = from_json<T>(v, where); };
  d.load = [section, member](RunConfig& c) { return to_json(section(c).*member); };
  return d;
}
// A choice: the names, the default and the parsing all come from the enum (config/choices.h).
template <class S, class E>
KeyDecl choice(std::string path, SectionOf<S> section, E S::*member, E def, std::string doc) {
  KeyDecl d = key(std::move(path), section, member, kStr, Json(choice_name(def)), std::move(doc));
  d.spec.choices = choice_names<E>();
  const std::string where = d.spec.path;
  d.store = [section, member, where](const Json& v, RunConfig& c) {
    section(c).*member = parse_choice<E>(v.get<std::string>(), where);
  };
  return d;
}
// A string choice that a later module resolves (model.attention: "auto" depends on the LibTorch
// the model runs on): the names are listed here for validation and the docs.
template <class S>
KeyDecl names(std::string path, SectionOf<S> section, std::string S::*member, std::vector<std::string> choices,
              std::string def, std::string doc) {
  KeyDecl d = key(std::move(path), section, member, kStr, Json(def), std::move(doc));
  d.spec.choices = std::move(choices);
  return d;
}
KeyDecl ranged(KeyDecl d, std::optional<double> min, std::optional<double> max, bool min_exclusive = false) {
  d.spec.min = min;
  d.spec.max = max;
  d.spec.min_exclusive = min_exclusive;
  return d;
}
KeyDecl aka(KeyDecl d, std::vector<std::string> aliases) {
  d.spec.aliases = std::move(aliases);
  return d;
}

// Every key of the run config, once.
std::vector<KeyDecl> make_declarations() {
  const auto m = &model_section;
  const auto d = &data_section;
  const auto l = &lora_section;
  const auto p = &parallel_section;
  const auto t = &train_section;
  const auto k = &checkpoint_section;
  const auto g = &log_section;
  KeyDecl targets = key("lora.target_modules", l, &LoraConfig::target_modules, Kind::kStringOrStringList,
                        Json({"q_proj", "v_proj"}),
                        "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, or \"all-linear\"");
  targets.spec.choices = {"all-linear"};
  return {
      key("run_dir", &top, &RunConfig::run_dir, kStr, kRequired,
          "the run folder: config.json, metrics.jsonl, adapter/, model/, checkpoints/"),
      key("model.path", m, &ModelConfig::path, kStr, kRequired, "Hugging Face model folder"),
      choice("model.dtype", m, &ModelConfig::dtype, WeightDtype::kAuto,
             "dtype the base weights are held in; auto = train.precision"),
      choice("model.quantize", m, &ModelConfig::quantize, Quantization::kNone, "quantized frozen base (LoRA only)"),
      names("model.attention", m, &ModelConfig::attention, {"auto", "sdpa", "eager"}, "auto",
            "attention kernel: sdpa (fused, LibTorch 2.x), eager (scores materialized); auto = sdpa where available"),
      key("data.train", d, &DataConfig::train, kStr, kRequired, "training dataset, JSON array or JSONL"),
      key("data.eval", d, &DataConfig::eval, kStr, Json(""), "evaluation dataset; empty = none"),
      choice("data.format", d, &DataConfig::format, RecordFormat::kAlpaca, "record format"),
      ranged(key("data.max_seq_len", d, &DataConfig::max_seq_len, kInt, Json(512), "tokens per sequence at most"), 1,
             std::nullopt),
      key("data.packing", d, &DataConfig::packing, kBool, Json(false), "concatenate samples up to max_seq_len"),
      key("data.template", d, &DataConfig::template_spec, Kind::kStringOrObject, Json("auto"),
          "prompt template: a built-in name or an object"),
      key("data.train_on_prompt", d, &DataConfig::train_on_prompt, kBool, Json(false), "also train on prompt tokens"),
      choice("data.too_long", d, &DataConfig::too_long, TooLong::kTruncate, "what to do with samples over max_seq_len"),
      choice("data.on_bad_record", d, &DataConfig::on_bad_record, OnBadRecord::kError,
             "what to do with a malformed record"),
      ranged(key("data.max_bad_records", d, &DataConfig::max_bad_records, kInt, Json(100),
                 "skipped records allowed before it is an error"),
             0, std::nullopt),
      key("data.cache_dir", d, &DataConfig::cache_dir, kStr, Json(""), "where token files go; empty = RUN_DIR/tokens"),
      ranged(key("data.prefetch", d, &DataConfig::prefetch, kInt, Json(2), "batches prepared ahead"), 0, 64),
      ranged(key("data.num_workers", d, &DataConfig::num_workers, kInt, Json(0), "tokenization threads; 0 = every core"),
             0, 1024),
      key("data.shuffle", d, &DataConfig::shuffle, kBool, Json(true), "reshuffle the training set every epoch"),
      ranged(key("lora.r", l, &LoraConfig::r, kInt, Json(8), "adapter rank"), 1, 4096),
      ranged(aka(key("lora.alpha", l, &LoraConfig::alpha, kNum, Json(16), "adapter scale numerator"), {"lora_alpha"}),
             0, std::nullopt, true),
      ranged(aka(key("lora.dropout", l, &LoraConfig::dropout, kNum, Json(0.05), "dropout on the adapter branch"),
                 {"lora_dropout"}),
             0, 0.999),
      targets,
      key("lora.use_rslora", l, &LoraConfig::use_rslora, kBool, Json(false), "scale alpha/sqrt(r) instead of alpha/r"),
      key("lora.init_from", l, &LoraConfig::init_from, kStr, Json(""), "adapter folder to continue from"),
      choice("parallel.strategy", p, &ParallelConfig::strategy, Strategy::kDdp, "data-parallel strategy"),
      choice("parallel.backend", p, &ParallelConfig::backend, Backend::kAuto, "communication backend"),
      ranged(key("parallel.bucket_mb", p, &ParallelConfig::bucket_mb, kNum, Json(25), "gradient bucket size in MiB"), 0,
             std::nullopt, true),
      choice("parallel.grad_comm_dtype", p, &ParallelConfig::grad_comm_dtype, Precision::kFp32,
             "dtype gradients travel in"),
      key("parallel.offload_optimizer", p, &ParallelConfig::offload_optimizer, kBool, Json(false),
          "keep optimizer state in host memory"),
      key("parallel.overlap_grad_reduce", p, &ParallelConfig::overlap_grad_reduce, kBool, Json(true),
          "reduce gradient buckets during backward"),
      ranged(key("parallel.fsdp_prefetch", p, &ParallelConfig::fsdp_prefetch, kInt, Json(1),
                 "fsdp: layers gathered ahead of their use (0 = at use)"),
             0, 64),
      key("parallel.fsdp_reshard_after_forward", p, &ParallelConfig::fsdp_reshard_after_forward, kBool, Json(true),
          "fsdp: free each layer after its forward (false: keep it whole until its backward)"),
      ranged(key("parallel.timeout_s", p, &ParallelConfig::timeout_s, kNum, Json(300),
                 "seconds before a collective or rendezvous fails"),
             0, std::nullopt, true),
      ranged(aka(key("train.global_batch_size", t, &TrainConfig::global_batch_size, kInt, kRequired,
                     "sequences per optimizer step over all ranks"),
                 {"batch_size", "global_batch", "train_batch_size"}),
             1, std::nullopt),
      ranged(aka(key("train.micro_batch_size", t, &TrainConfig::micro_batch_size, kInt, Json(1),
                     "sequences per forward/backward on one rank"),
                 {"per_device_train_batch_size", "micro_batch"}),
             1, std::nullopt),
      ranged(aka(key("train.epochs", t, &TrainConfig::epochs, kInt, Json(1), "passes over the training set"),
                 {"num_epochs", "num_train_epochs"}),
             1, std::nullopt),
      ranged(key("train.max_steps", t, &TrainConfig::max_steps, kInt, Json(0),
                 "optimizer steps at most; 0 = run the epochs"),
             0, std::nullopt),
      ranged(key("train.lr", t, &TrainConfig::lr, kNum, kRequired, "peak learning rate"), 0, std::nullopt, true),
      choice("train.lr_schedule", t, &TrainConfig::lr_schedule, LrSchedule::kCosine,
             "learning-rate schedule after warmup"),
      ranged(key("train.warmup_steps", t, &TrainConfig::warmup_steps, kInt, Json(0), "linear warmup steps"), 0,
             std::nullopt),
      ranged(key("train.min_lr_ratio", t, &TrainConfig::min_lr_ratio, kNum, Json(0.0), "final lr as a fraction of lr"),
             0, 1),
      ranged(key("train.weight_decay", t, &TrainConfig::weight_decay, kNum, Json(0.0), "decoupled (AdamW) weight decay"),
             0, std::nullopt),
      key("train.weight_decay_norms", t, &TrainConfig::weight_decay_norms, kBool, Json(false),
          "weight decay on norm weights (1-D parameters) too"),
      ranged(key("train.adam_beta1", t, &TrainConfig::adam_beta1, kNum, Json(0.9), "AdamW beta1"), 0, 0.999999),
      ranged(key("train.adam_beta2", t, &TrainConfig::adam_beta2, kNum, Json(0.999), "AdamW beta2"), 0, 0.999999),
      ranged(key("train.adam_eps", t, &TrainConfig::adam_eps, kNum, Json(1e-8), "AdamW epsilon"), 0, std::nullopt, true),
      ranged(aka(key("train.grad_clip", t, &TrainConfig::grad_clip, kNum, Json(1.0), "max global gradient norm; 0 = off"),
                 {"max_grad_norm"}),
             0, std::nullopt),
      ranged(key("train.seed", t, &TrainConfig::seed, kInt, Json(42), "seed for initialization, dropout and shuffling"),
             0, std::nullopt),
      choice("train.precision", t, &TrainConfig::precision, Precision::kFp32, "compute dtype"),
      choice("train.loss_scale", t, &TrainConfig::loss_scale, LossScaling::kAuto,
             "dynamic loss scaling; auto = on for fp16 only"),
      ranged(key("train.loss_scale_init", t, &TrainConfig::loss_scale_init, kNum, Json(65536.0),
                 "first dynamic loss scale"),
             1, 3.4e38),
      ranged(key("train.loss_scale_growth_interval", t, &TrainConfig::loss_scale_growth_interval, kInt, Json(2000),
                 "good steps before the loss scale doubles"),
             1, std::nullopt),
      key("train.activation_checkpointing", t, &TrainConfig::activation_checkpointing, kBool, Json(false),
          "recompute each decoder layer in backward"),
      key("train.offload_activations", t, &TrainConfig::offload_activations, kBool, Json(false),
          "with activation checkpointing on a GPU: keep each layer's input in host memory until its recompute"),
      key("train.offload_prefetch", t, &TrainConfig::offload_prefetch, kBool, Json(true),
          "with offload_activations: copy the next layer's input back while backward works on this one (one "
          "more layer input on the GPU)"),
      ranged(key("train.loss_chunk_tokens", t, &TrainConfig::loss_chunk_tokens, kInt, Json(1024),
                 "target tokens per chunk of the output head and cross-entropy; 0 = full logits"),
             0, std::nullopt),
      choice("train.on_nonfinite", t, &TrainConfig::on_nonfinite, OnNonfinite::kStop,
             "a NaN/Inf loss or gradient stops the run or skips the step"),
      key("train.skip_spikes", t, &TrainConfig::skip_spikes, kBool, Json(false),
          "skip a step whose loss or gradient norm is spike_sigma standard deviations above the last spike_window "
          "steps' mean"),
      ranged(key("train.spike_window", t, &TrainConfig::spike_window, kInt, Json(128),
                 "steps of history for train.skip_spikes"),
             2, std::nullopt),
      ranged(key("train.spike_sigma", t, &TrainConfig::spike_sigma, kNum, Json(6.0),
                 "standard deviations that make a spike"),
             0, std::nullopt, true),
      ranged(key("train.threads", t, &TrainConfig::threads, kInt, Json(0), "CPU threads per rank; 0 = cores / local ranks"),
             0, 1024),
      ranged(key("checkpoint.every_steps", k, &CheckpointConfig::every_steps, kInt, Json(0),
                 "save every N steps; 0 = at the end only"),
             0, std::nullopt),
      ranged(key("checkpoint.keep_last", k, &CheckpointConfig::keep_last, kInt, Json(2), "checkpoints kept"), 1,
             std::nullopt),
      choice("checkpoint.resume", k, &CheckpointConfig::resume, ResumeMode::kAuto,
             "continue from checkpoints/latest when present"),
      key("checkpoint.save_at_end", k, &CheckpointConfig::save_at_end, kBool, Json(true),
          "write the last step's checkpoint and the adapter or model; false for throwaway runs (ft_bench)"),
      key("checkpoint.async", k, &CheckpointConfig::async, kBool, Json(false),
          "write checkpoints in the background: training waits only for a copy in host memory"),
      ranged(key("log.every_steps", g, &LogConfig::every_steps, kInt, Json(1), "metrics line every N steps"), 1,
             std::nullopt),
      ranged(key("log.eval_every_steps", g, &LogConfig::eval_every_steps, kInt, Json(0),
                 "evaluate every N steps; 0 = at the end only"),
             0, std::nullopt),
  };
}

const std::vector<KeyDecl>& declarations() {
  static const std::vector<KeyDecl> decls = make_declarations();
  return decls;
}

// Sections that may be absent altogether: no "lora" = full fine-tuning.
const std::vector<std::string> kOptionalSections = {"lora"};

// The markdown cells of one key.
const char* kind_cell(Kind kind) {
  switch (kind) {
    case Kind::kString: return "string";
    case Kind::kInteger: return "integer";
    case Kind::kNumber: return "number";
    case Kind::kBool: return "bool";
    case Kind::kStringList: return "list of strings";
    case Kind::kStringOrStringList: return "string or list of strings";
    case Kind::kStringOrObject: return "string or object";
  }
  return "";
}

std::string allowed_cell(const KeySpec& k) {
  std::string out;
  for (std::size_t i = 0; i < k.choices.size(); ++i) out += (i ? ", " : "") + ("`" + k.choices[i] + "`");
  if (k.min && k.max) {
    out += str(k.min_exclusive ? "(" : "[", *k.min, ", ", *k.max, "]");
  } else if (k.min) {
    out += str(k.min_exclusive ? "> " : ">= ", *k.min);
  } else if (k.max) {
    out += str("<= ", *k.max);
  }
  return out;
}

std::string escape_cell(std::string text) {
  std::string out;
  for (char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

}  // namespace

const Schema& run_config_schema() {
  static const Schema schema = [] {
    std::vector<KeySpec> keys;
    for (const KeyDecl& d : declarations()) keys.push_back(d.spec);
    return Schema(std::move(keys), kOptionalSections);
  }();
  return schema;
}

std::string config_key_table() {
  std::string out = "| key | type | default | allowed | description |\n|---|---|---|---|---|\n";
  for (const KeyDecl& d : declarations()) {
    const KeySpec& k = d.spec;
    const std::string def = k.default_value ? "`" + k.default_value->dump() + "`" : std::string("required");
    out += str("| `", k.path, "` | ", kind_cell(k.kind), " | ", def, " | ", allowed_cell(k), " | ", escape_cell(k.doc),
               " |\n");
  }
  return out;
}

Json default_struct_values() {
  RunConfig c;
  c.lora.emplace();
  Json out = Json::object();
  for (const KeyDecl& d : declarations())
    if (d.spec.default_value) out[d.spec.path] = d.load(c);
  return out;
}

bool uses_loss_scaling(const TrainConfig& train) {
  return train.loss_scale == LossScaling::kDynamic ||
         (train.loss_scale == LossScaling::kAuto && train.precision == Precision::kFp16);
}

RunConfig parse_run_config(Json config, const std::string& source, const std::vector<std::string>& overrides) {
  const Schema& schema = run_config_schema();
  for (const auto& o : overrides) schema.apply_override(config, o);
  Json r = schema.resolve(config, source);

  RunConfig c;
  c.source = source;
  c.resolved = r;
  for (const KeyDecl& d : declarations())
    if (const Json* value = find_path(r, d.spec.path)) d.store(*value, c);  // absent: an optional section

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
  } else if (c.model.quantize != Quantization::kNone) {
    errors.push_back("model.quantize: a quantized base needs a lora section (the base stays frozen)");
  }
  if (c.train.offload_activations && !c.train.activation_checkpointing)
    errors.push_back("train.offload_activations: offloads the inputs activation checkpointing keeps; set "
                     "train.activation_checkpointing to true as well");
  if (c.model.dtype != WeightDtype::kAuto && choice_name(c.model.dtype) != choice_name(c.train.precision))
    errors.push_back(str("model.dtype: \"", choice_name(c.model.dtype), "\" differs from train.precision \"",
                         choice_name(c.train.precision),
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
