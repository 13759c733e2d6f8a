#include "plan/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "io/dtype.h"
#include "model/lora.h"
#include "model/quantization.h"
#include "util/error.h"

namespace ft::plan {
namespace {

constexpr std::int64_t kFrameworkOverhead = 1LL << 30;  // CUDA context + cuBLAS/NCCL workspaces, measured ~0.9 GiB

std::int64_t div_up(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

struct Projection {
  std::string kind;
  std::int64_t rows, cols;  // [out, in]
};

std::vector<Projection> layer_projections(const io::LlamaConfig& m) {
  const std::int64_t h = m.hidden_size, q = m.num_attention_heads * m.head_dim, kv = m.num_key_value_heads * m.head_dim;
  const std::int64_t i = m.intermediate_size;
  return {{"self_attn.q_proj", q, h}, {"self_attn.k_proj", kv, h}, {"self_attn.v_proj", kv, h},
          {"self_attn.o_proj", h, q}, {"mlp.gate_proj", i, h},    {"mlp.up_proj", i, h},
          {"mlp.down_proj", h, i}};
}

// The shapes everything else follows from.
struct Shapes {
  std::int64_t layers, hidden, heads, kv_heads, head_dim, intermediate, vocab;
  std::int64_t layer_params = 0;   // projections + 2 norms
  std::int64_t root_params = 0;    // embeddings, lm_head (untied), final norm
  std::int64_t params = 0;         // Ψ
  std::int64_t largest_matrix = 0;
  std::vector<Projection> projections;
};

Shapes shapes_of(const io::LlamaConfig& m) {
  Shapes s;
  s.layers = m.num_hidden_layers;
  s.hidden = m.hidden_size;
  s.heads = m.num_attention_heads;
  s.kv_heads = m.num_key_value_heads;
  s.head_dim = m.head_dim;
  s.intermediate = m.intermediate_size;
  s.vocab = m.vocab_size;
  s.projections = layer_projections(m);
  for (const auto& p : s.projections) {
    s.layer_params += p.rows * p.cols;
    s.largest_matrix = std::max(s.largest_matrix, p.rows * p.cols);
  }
  s.layer_params += 2 * s.hidden;
  s.root_params = s.vocab * s.hidden * (m.tie_word_embeddings ? 1 : 2) + s.hidden;
  s.params = s.layers * s.layer_params + s.root_params;
  return s;
}

// The LoRA row: the config's LoRA (or r = 16 on all linear layers when it has none).
struct LoraSetup {
  model::LoraOptions options;
  std::string strategy;
  model::Quantization quantize = model::Quantization::kNone;
};

LoraSetup lora_setup(const config::RunConfig& run) {
  LoraSetup l;
  if (run.lora) {
    l.options = model::lora_options(*run.lora);
    l.strategy = run.parallel.strategy;
    l.quantize = model::parse_quantization(run.model.quantize, "model.quantize");
  } else {
    l.options.r = 16;
    l.options.targets = io::LoraTargets{{"all-linear"}, ""};
    l.strategy = "ddp";
  }
  return l;
}

// LoRA parameters, and which projections of a layer carry LoRA (the same in every layer unless a
// regex says otherwise: counted layer by layer).
std::int64_t lora_parameters(const Shapes& s, const model::LoraOptions& o, std::vector<std::int64_t>* per_layer_inputs) {
  std::int64_t n = 0;
  for (std::int64_t layer = 0; layer < s.layers; ++layer)
    for (const auto& p : s.projections) {
      if (!o.targets.matches("model.layers." + std::to_string(layer) + "." + p.kind)) continue;
      n += o.r * (p.rows + p.cols);
      if (layer == 0 && per_layer_inputs) per_layer_inputs->push_back(p.cols);
    }
  return n;
}

// Bytes autograd keeps for one decoder layer and `tokens` tokens (b · s), our eager LLaMA layer:
// norms in fp32, q/k/v and their rotary outputs, K/V repeated for the query heads, the s² attention
// scores (compute dtype), fp32 scores + bias, fp32 softmax, probabilities (compute dtype), the
// SwiGLU intermediates; a LoRA branch keeps its input in fp32 (and a dropout mask and copy).
std::int64_t layer_activation_bytes(const Shapes& s, std::int64_t batch, std::int64_t seq, std::int64_t d,
                                    const std::vector<std::int64_t>& lora_inputs, std::int64_t r, bool dropout) {
  const std::int64_t t = batch * seq;
  const std::int64_t h = s.hidden, q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
  std::int64_t bytes = 0;
  bytes += 2 * t * h * (d + 4 + d);                 // two RMSNorms: input, fp32 copy, output
  bytes += t * (q + 2 * kv) * d;                    // q, k, v projections
  bytes += t * (q + kv) * d;                        // rotary outputs
  bytes += 2 * t * q * d;                           // K and V repeated to the query heads
  bytes += batch * s.heads * seq * seq * (d + 4 + 4 + d);  // scores, fp32 + bias, softmax, probs
  bytes += t * q * d;                               // attention output (o_proj input)
  bytes += 4 * t * s.intermediate * d;              // gate, silu(gate), up, product
  for (std::int64_t in : lora_inputs) bytes += t * (in * 4 + r * 4 + (dropout ? in * 5 : 0));
  return bytes;
}

// Logits in the compute dtype, their fp32 log-softmax and its gradient.
std::int64_t logits_bytes(const Shapes& s, std::int64_t batch, std::int64_t seq, std::int64_t d) {
  return batch * seq * s.vocab * (d + 4 + 4);
}

std::string gb(std::int64_t bytes) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(1);
  o << bytes / 1e9 << " GB";
  return o.str();
}

}  // namespace

MemoryBreakdown memory_for(const config::RunConfig& run, const io::LlamaConfig& model, const std::string& strategy,
                           bool lora, std::int64_t micro_batch, std::int64_t seq_len, std::int64_t gpus) {
  const Shapes s = shapes_of(model);
  const std::int64_t d = static_cast<std::int64_t>(c10::elementSize(io::parse_float_dtype(run.train.precision, "train.precision")));
  const bool mixed = d < 4;
  const std::int64_t w = std::max<std::int64_t>(gpus, 1);
  const bool zero = strategy == "zero1" || strategy == "zero2" || strategy == "fsdp";
  const bool sharded_grads = strategy == "zero2" || strategy == "fsdp";
  const std::int64_t bucket = static_cast<std::int64_t>(run.parallel.bucket_mb * (1 << 20));
  const std::int64_t buckets_in_flight = strategy == "zero2" ? 3 : 2;
  MemoryBreakdown m;
  std::vector<std::int64_t> lora_inputs;
  std::int64_t r = 0;
  bool dropout = false;
  if (lora) {
    const LoraSetup l = lora_setup(run);
    const std::int64_t psi_l = lora_parameters(s, l.options, &lora_inputs);
    r = l.options.r;
    dropout = l.options.dropout > 0;
    // The frozen base, in the compute dtype or quantized, on every rank.
    std::int64_t base = s.params * d;
    if (l.quantize != model::Quantization::kNone) {
      base = s.root_params * d + s.layers * 2 * s.hidden * d;
      for (const auto& p : s.projections) base += s.layers * model::quantized_bytes(p.rows, p.cols, l.quantize);
      m.gathered += s.largest_matrix * (4 + d);  // one matrix dequantized (fp32 values, then d)
    }
    // LoRA weights train in fp32: they are their own master under DDP; ZeRO keeps a master shard.
    m.weights = base + (strategy == "fsdp" ? div_up(4 * psi_l, w) : 4 * psi_l);
    m.gradients = sharded_grads ? div_up(4 * psi_l, w) : 4 * psi_l;
    m.optimizer = zero ? div_up(12 * psi_l, w) : 8 * psi_l;
    m.comm_buckets = buckets_in_flight * std::min(bucket, 4 * psi_l);
    if (strategy == "fsdp") m.gathered += 2 * 4 * psi_l / std::max<std::int64_t>(s.layers, 1);
  } else {
    const std::int64_t psi = s.params;
    m.weights = strategy == "fsdp" ? div_up(d * psi, w) : d * psi;
    m.gradients = sharded_grads ? div_up(d * psi, w) : d * psi;
    const std::int64_t per_param = (mixed || zero) ? 12 : 8;  // fp32 DDP: the parameters are the master
    m.optimizer = zero ? div_up(per_param * psi, w) : per_param * psi;
    if (strategy == "fsdp") {
      m.comm_buckets = 3 * s.layer_params * d;               // gradient staging of up to three layers
      m.gathered = s.root_params * d + 2 * s.layer_params * d;  // the root unit and two layers whole
    } else {
      m.comm_buckets = buckets_in_flight * std::min(bucket, d * psi);
    }
  }
  if (run.parallel.offload_optimizer) {
    m.host_optimizer = m.optimizer + div_up(4 * (lora ? 0 : s.params), w);
    m.optimizer = 0;
  }
  const std::int64_t layer = layer_activation_bytes(s, micro_batch, seq_len, d, lora_inputs, r, dropout);
  const std::int64_t edges = micro_batch * seq_len * s.hidden * (d + d + 4 + d) + logits_bytes(s, micro_batch, seq_len, d);
  m.activations_full = s.layers * layer + edges;
  m.activations_checkpointed = s.layers * micro_batch * seq_len * s.hidden * d + layer + edges;
  m.activations = run.train.activation_checkpointing ? m.activations_checkpointed : m.activations_full;
  m.overhead = kFrameworkOverhead;
  return m;
}

MemoryPlan plan_memory(const config::RunConfig& run, const io::LlamaConfig& model, const PlanOptions& options) {
  FT_CHECK(options.gpus > 0, "--gpus must be positive, got ", options.gpus);
  FT_CHECK(options.gpu_mem_gb > 0, "--gpu-mem-gb must be positive, got ", options.gpu_mem_gb);
  MemoryPlan plan;
  plan.options = options;
  plan.seq_len = options.seq_len > 0 ? options.seq_len : run.data.max_seq_len;
  const Shapes s = shapes_of(model);
  plan.parameters = s.params;
  plan.lora_parameters = lora_parameters(s, lora_setup(run).options, nullptr);
  const std::int64_t capacity = static_cast<std::int64_t>(options.gpu_mem_gb * 1e9 * (1 - options.headroom));
  const std::int64_t global = run.train.global_batch_size;

  std::vector<std::pair<std::string, bool>> rows = {{"lora+" + lora_setup(run).strategy, true}};
  for (const char* name : {"ddp", "zero1", "zero2", "fsdp"}) rows.emplace_back(name, false);
  for (const auto& [name, lora] : rows) {
    StrategyPlan p;
    p.name = name;
    p.lora = lora;
    const std::string strategy = lora ? name.substr(5) : name;
    auto at = [&](std::int64_t b) { return memory_for(run, model, strategy, lora, b, plan.seq_len, options.gpus); };
    for (std::int64_t b = 1; b <= options.max_micro_batch && at(b).total() <= capacity; ++b) p.micro_batch = b;
    p.fits = p.micro_batch > 0;
    p.at_micro_batch = at(std::max<std::int64_t>(p.micro_batch, 1));
    // The accumulation for the global batch: with the largest micro-batch that divides it, or
    // else the nearest global batch that a fitting micro-batch divides.
    const std::int64_t largest = std::max<std::int64_t>(p.micro_batch, 1);
    p.global_batch = global;
    std::int64_t micro = 0;
    for (std::int64_t b = largest; b >= 1; --b)
      if (global % (b * options.gpus) == 0) {
        micro = b;
        break;
      }
    if (micro == 0) {
      micro = largest;
      const std::int64_t unit = micro * options.gpus;
      p.global_batch = std::max<std::int64_t>(unit, (global + unit / 2) / unit * unit);
      p.note = str("train.global_batch_size ", global, " is not a multiple of ", options.gpus,
                   " GPUs; the nearest that is: ", p.global_batch);
    } else if (micro < largest) {
      p.note = str("micro-batch ", largest, " fits, but ", micro, " is the largest that divides the global batch ",
                   global, " over ", options.gpus, " GPUs");
    }
    if (p.fits) {
      p.micro_batch = micro;
      p.at_micro_batch = at(micro);
    }
    p.grad_accum = p.global_batch / (micro * options.gpus);
    plan.strategies.push_back(p);
  }

  // Prefer what the config asks for (LoRA or a full fine-tune), then the least communication.
  const StrategyPlan* pick = nullptr;
  for (const auto& p : plan.strategies)
    if (p.fits && p.lora == run.lora.has_value() && !pick) pick = &p;
  const std::string where = str(options.gpus, " x ", options.gpu_mem_gb, " GB at ", plan.seq_len, " tokens");
  if (pick) {
    plan.recommendation = str("Use ", pick->name, " with micro-batch ", pick->micro_batch, " and ", pick->grad_accum,
                              " accumulation steps: ", gb(pick->at_micro_batch.total()), " of ", options.gpu_mem_gb,
                              " GB per GPU on ", where, ".");
  } else if (run.lora) {
    plan.recommendation = str("Nothing fits ", where, ": quantize the base (model.quantize int8 or nf4), turn on "
                              "activation checkpointing, shorten data.max_seq_len or add GPUs.");
  } else {
    plan.recommendation = str("No full fine-tune fits ", where, ": try parallel.offload_optimizer, activation "
                              "checkpointing, more GPUs, or LoRA", plan.strategies[0].fits ? " (which fits)" : "", ".");
  }
  return plan;
}

}  // namespace ft::plan
