#include "plan/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "io/dtype.h"
#include "model/lora.h"
#include "model/quantization.h"
#include "parallel/strategy_traits.h"
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
  std::int64_t layer_params = 0;   // projections + 2 norms + biases
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
  s.layer_params += 2 * s.hidden + m.layer_bias_parameters();  // norms, projection biases (qwen2)
  s.root_params = s.vocab * s.hidden * (m.tie_word_embeddings ? 1 : 2) + s.hidden;
  s.params = m.num_parameters();
  return s;
}

// The LoRA row: the config's LoRA (or r = 16 on all linear layers when it has none).
struct LoraSetup {
  model::LoraOptions options;
  config::Strategy strategy = config::Strategy::kDdp;
  model::Quantization quantize = model::Quantization::kNone;
};

LoraSetup lora_setup(const config::RunConfig& run) {
  LoraSetup l;
  if (run.lora) {
    l.options = model::lora_options(*run.lora);
    l.strategy = run.parallel.strategy;
    l.quantize = run.model.quantize;
  } else {
    l.options.r = 16;
    l.options.targets = io::LoraTargets{{"all-linear"}, ""};
  }
  return l;
}

// LoRA parameters, and which projections of a layer carry LoRA (the same in every layer unless a
// regex says otherwise: counted layer by layer).
// A LoRA-adapted projection of a layer: its input's width, and which tensor that input is (q, k
// and v read one, gate and up another: a branch that keeps its input keeps that tensor once).
struct LoraInput {
  std::int64_t width;
  std::string tensor;  // "attention input", "attention output", "mlp input", "mlp product"
};

std::string input_tensor_of(const std::string& kind) {
  if (kind == "self_attn.o_proj") return "attention output";
  if (kind == "mlp.down_proj") return "mlp product";
  return kind.rfind("self_attn.", 0) == 0 ? "attention input" : "mlp input";
}

std::int64_t lora_parameters(const Shapes& s, const model::LoraOptions& o, std::vector<LoraInput>* per_layer_inputs) {
  std::int64_t n = 0;
  for (std::int64_t layer = 0; layer < s.layers; ++layer)
    for (const auto& p : s.projections) {
      if (!o.targets.matches("model.layers." + std::to_string(layer) + "." + p.kind)) continue;
      n += o.r * (p.rows + p.cols);
      if (layer == 0 && per_layer_inputs) per_layer_inputs->push_back({p.cols, input_tensor_of(p.kind)});
    }
  return n;
}

// How attention runs (model/attention.h): eager keeps the s² scores; sdpa (a fused kernel: flash
// or memory-efficient on CUDA, flash on the CPU) keeps per query only a log-sum-exp. A mask
// tensor exists for eager always, for sdpa only with packing (otherwise plain causal), and with
// a mask grouped K/V heads are repeated (CUDA's masked kernel takes no grouped heads).
struct AttentionShape {
  bool sdpa = false;
  bool masked = true;
  std::int64_t mask_dtype_bytes = 4;  // eager's fp32 bias; sdpa's mask is in the compute dtype
};

// Bytes autograd keeps for one decoder layer and `tokens` tokens (b · s) in our LLaMA layer
// (model/decoder_layer.cpp and what it calls), tensor by tensor; a tensor converted to the
// dtype it already has is the same tensor, so fp32 (d = 4) keeps fewer than bf16. A frozen
// projection does not keep its input (no weight gradient to compute): under LoRA below fp32 a
// projection's input in d is kept by nobody, only the adapters' fp32 copies of it are.
// Training runs the fused RMSNorm and SwiGLU (model/fused_layer_ops.h), which keep only their inputs:
//   each RMSNorm: its input in d, one fp32 scale per token, the output in d (the projections'
//   input);
//   eager attention: q after rotary, K and V (repeated to the query heads when grouped: the
//   copies are kept, the originals not), the fp32 softmax output and, below fp32, the
//   probabilities in d (s² per head), the attention output (o_proj's input);
//   sdpa attention: q, K and V as the kernel took them (repeated only with a mask), its output
//   (laid out [b, s, heads, hd], so o_proj's input is the same tensor) and an fp32 log-sum-exp
//   per query and head;
//   SwiGLU: gate, up and, in a full fine-tune, their product (down_proj's input, for its weight
//   gradient); a LoRA branch: the rank-r hidden and, without dropout, its input as it came
//   (model/lora_branch.h: in d, one tensor for the branches that read the same one, nothing more
//   where the layer keeps it anyway: in fp32, and sdpa's output for o_proj; down_proj's branch
//   keeps none, it remakes the product from gate and up) or, with dropout, the dropped fp32 copy
//   and the mask (dropout_mask_bytes per element: 1 on CUDA, whose dropout keeps a bool mask; 4 on
//   the CPU, whose dropout keeps fp32 noise).
// The scores themselves are transient (see attention_backward_bytes).
std::int64_t layer_activation_bytes(const Shapes& s, std::int64_t batch, std::int64_t seq, std::int64_t d, bool lora,
                                    const std::vector<LoraInput>& lora_inputs, std::int64_t r, std::int64_t dropout_mask_bytes,
                                    const AttentionShape& attention) {
  const std::int64_t t = batch * seq;
  const std::int64_t h = s.hidden, q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
  const bool grouped = s.heads != s.kv_heads;
  const std::int64_t below_fp32 = d < 4 ? 1 : 0;
  const std::int64_t inputs_kept = !lora || d == 4 ? 1 : 0;  // the projections' inputs in d
  std::int64_t bytes = 0;
  bytes += 2 * (t * h * (d + inputs_kept * d) + t * 4);  // two RMSNorms
  if (attention.sdpa) {
    const bool repeated = grouped && attention.masked;
    bytes += t * q * d + (repeated ? 2 * t * q : 2 * t * kv) * d;  // q (rotary), K and V
    bytes += t * q * d;                                    // the output, o_proj's input
    bytes += batch * s.heads * seq * 4;                    // log-sum-exp
  } else {
    bytes += t * q * d + (grouped ? 2 * t * q : 2 * t * kv) * d;  // q (rotary), K and V
    bytes += batch * s.heads * seq * seq * (4 + below_fp32 * d);  // softmax output, probabilities
    bytes += inputs_kept * t * q * d;                      // attention output
  }
  bytes += (lora ? 2 : 3) * t * s.intermediate * d;  // gate, up and (for down_proj's weight gradient) their product
  std::set<std::string> kept;  // the input tensors the branches keep without dropout
  for (const LoraInput& in : lora_inputs) {
    bytes += t * r * 4;
    if (dropout_mask_bytes > 0) {
      bytes += t * in.width * (4 + dropout_mask_bytes);
    } else if (in.tensor == "mlp product") {
      // remade from gate and up in backward (model/lora_branch.h's lora_branch_of_swiglu)
    } else if (!inputs_kept && !(attention.sdpa && in.tensor == "attention output") && kept.insert(in.tensor).second) {
      bytes += t * in.width * d;
    }
  }
  return bytes;
}

// What lives only while one layer's attention runs backward, on top of what is kept: eager, the
// softmax gradient's fp32 input and output (s² each per head; the peak of a step, measured);
// sdpa, the gradients of q, K and V, accumulated in fp32.
std::int64_t attention_backward_bytes(const Shapes& s, std::int64_t batch, std::int64_t seq,
                                      const AttentionShape& attention) {
  if (!attention.sdpa) return batch * s.heads * seq * seq * (4 + 4);
  const std::int64_t t = batch * seq, q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
  const bool repeated = s.heads != s.kv_heads && attention.masked;
  return (t * q + (repeated ? 2 * t * q : 2 * t * kv)) * 4;
}

// The attention mask every layer of a forward shares ([b, 1, s, s]), when there is one.
std::int64_t mask_bytes(std::int64_t batch, std::int64_t seq, const AttentionShape& attention) {
  return attention.masked ? batch * seq * seq * attention.mask_dtype_bytes : 0;
}

// Kept at the top of the stack: the final RMSNorm (as a layer's; its output is the head's input).
std::int64_t edge_activation_bytes(const Shapes& s, std::int64_t batch, std::int64_t seq, std::int64_t d) {
  return batch * seq * (s.hidden * 2 * d + 4);
}

// What the output head and the loss hold at the end of the forward and the start of backward
// (model/causal_lm_loss.h). Full logits (chunk 0): the logits in d, their shifted copy, (below
// fp32) its fp32 conversion and the loss's fp32 log-softmax kept for backward. Chunked: one chunk
// of target rows at a time (every position is counted as a target, as with packing): its logits
// in d and their fp32 conversion (one buffer in fp32, where the conversion is the same tensor),
// which forward turns in place into the gradient and then converts back to d; plus the selected
// hidden rows, their gradient (made in forward; fp16 keeps the rows for backward instead) and,
// when the head trains, the weight gradient [V, H] accumulated chunk by chunk.
std::int64_t logits_bytes(const Shapes& s, std::int64_t batch, std::int64_t seq, std::int64_t d, std::int64_t chunk,
                          bool head_trainable) {
  const std::int64_t positions = batch * (seq - 1);
  if (chunk <= 0)
    return batch * seq * s.vocab * d + positions * s.vocab * (d + (d < 4 ? 4 : 0)) + positions * s.vocab * 4;
  const std::int64_t rows = std::min(chunk, positions);
  return rows * s.vocab * (4 + (d < 4 ? d : 0)) + 2 * positions * s.hidden * d +
         (head_trainable ? s.vocab * s.hidden * d : 0);
}

std::string gb(std::int64_t bytes) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(1);
  o << bytes / 1e9 << " GB";
  return o.str();
}

}  // namespace

model::AttentionKernel planned_attention(const std::string& name) {
  if (name == "sdpa") return model::AttentionKernel::kSdpa;
  if (name == "eager") return model::AttentionKernel::kEager;
  FT_CHECK(name == "auto", "attention: expected auto, sdpa or eager, got \"", name, "\"");
  return model::sdpa_available() ? model::AttentionKernel::kSdpa : model::AttentionKernel::kEager;
}

MemoryBreakdown memory_for(const config::RunConfig& run, const io::LlamaConfig& model, config::Strategy strategy,
                           bool lora, std::int64_t micro_batch, std::int64_t seq_len, std::int64_t gpus,
                           model::AttentionKernel kernel, bool cpu) {
  const Shapes s = shapes_of(model);
  const std::int64_t d = static_cast<std::int64_t>(c10::elementSize(io::scalar_type(run.train.precision)));
  const parallel::StrategyTraits traits = parallel::strategy_traits(strategy);
  AttentionShape attention;
  attention.sdpa = kernel == model::AttentionKernel::kSdpa;
  // A sliding window shorter than the sequence needs a mask too (model/attention.h).
  attention.masked = !attention.sdpa || run.data.packing || (model.sliding_window > 0 && model.sliding_window < seq_len);
  attention.mask_dtype_bytes = attention.sdpa ? d : 4;
  const bool mixed = d < 4;
  const std::int64_t w = std::max<std::int64_t>(gpus, 1);
  const bool zero = traits.shards_optimizer;
  const bool sharded_grads = traits.shards_gradients;
  const bool sharded_params = traits.shards_parameters;
  const std::int64_t bucket = static_cast<std::int64_t>(run.parallel.bucket_mb * (1 << 20));
  const std::int64_t buckets_in_flight = traits.grad_buckets_in_flight;
  // FSDP: the layer in use, the one above it until its gradients are handed off, and the prefetched
  // ones; without resharding after forward, every layer at the end of forward.
  const std::int64_t layers_whole = run.parallel.fsdp_reshard_after_forward
                                        ? std::min<std::int64_t>(2 + run.parallel.fsdp_prefetch, s.layers)
                                        : s.layers;
  MemoryBreakdown m;
  std::vector<LoraInput> lora_inputs;
  std::int64_t r = 0;
  std::int64_t dropout_mask_bytes = 0;
  if (lora) {
    const LoraSetup l = lora_setup(run);
    const std::int64_t psi_l = lora_parameters(s, l.options, &lora_inputs);
    r = l.options.r;
    if (l.options.dropout > 0) dropout_mask_bytes = cpu ? 4 : 1;
    // The frozen base, in the compute dtype or quantized, on every rank.
    std::int64_t base = s.params * d;
    if (l.quantize != model::Quantization::kNone) {
      base = s.root_params * d + s.layers * (2 * s.hidden + model.layer_bias_parameters()) * d;  // norms, biases
      for (const auto& p : s.projections) base += s.layers * model::quantized_bytes(p.rows, p.cols, l.quantize);
      m.gathered += s.largest_matrix * (4 + d);  // one matrix dequantized (fp32 values, then d)
    }
    // LoRA weights train in fp32: they are their own master under DDP; ZeRO keeps a master shard.
    m.weights = base + (sharded_params ? div_up(4 * psi_l, w) : 4 * psi_l);
    m.gradients = sharded_grads ? div_up(4 * psi_l, w) : 4 * psi_l;
    m.optimizer = zero ? div_up(12 * psi_l, w) : 8 * psi_l;
    m.comm_buckets = buckets_in_flight * std::min(bucket, 4 * psi_l);
    if (sharded_params) m.gathered += layers_whole * 4 * psi_l / std::max<std::int64_t>(s.layers, 1);
    if (run.checkpoint.async) m.host_checkpoint = div_up(12 * psi_l, w) + 4 * psi_l;  // the adapter in fp32
  } else {
    const std::int64_t psi = s.params;
    m.weights = sharded_params ? div_up(d * psi, w) : d * psi;
    m.gradients = sharded_grads ? div_up(d * psi, w) : d * psi;
    // fp32 DDP and FSDP: the parameters (FSDP: their shard) are the master; ZeRO-1/2 keep a
    // separate fp32 master shard.
    const std::int64_t per_param = (mixed || traits.separate_master) ? 12 : 8;
    m.optimizer = zero ? div_up(per_param * psi, w) : per_param * psi;
    if (run.checkpoint.async) m.host_checkpoint = div_up(12 * psi, w) + d * psi;  // the model in the compute dtype
    if (sharded_params) {
      m.comm_buckets = 3 * s.layer_params * d;               // gradient staging of up to three layers
      m.gathered_resident = s.root_params * d;                 // the root unit stays whole
      m.gathered = m.gathered_resident + layers_whole * s.layer_params * d;  // and the layers whole at a time
    } else {
      m.comm_buckets = buckets_in_flight * std::min(bucket, d * psi);
    }
  }
  if (run.parallel.offload_optimizer) {
    m.host_optimizer = m.optimizer + div_up(4 * (lora ? 0 : s.params), w);
    m.optimizer = 0;
  }
  // The prefetched steps and the one training: ids, labels, positions and segments (int64).
  const std::int64_t accumulation = std::max<std::int64_t>(1, run.train.global_batch_size / (micro_batch * w));
  m.host_batches = (run.data.prefetch + 1) * accumulation * micro_batch * seq_len * 4 * 8;
  // The peak of a step comes either at the end of the forward (everything kept, the logits and the
  // mask) or in the backward of the top layer's attention (the loss's buffers freed by then);
  // with checkpointing, each layer's input is kept and one layer at a time is recomputed (its
  // mask with it).
  const std::int64_t layer = layer_activation_bytes(s, micro_batch, seq_len, d, lora, lora_inputs, r, dropout_mask_bytes, attention);
  const std::int64_t mask = mask_bytes(micro_batch, seq_len, attention);
  m.logits = logits_bytes(s, micro_batch, seq_len, d, run.train.loss_chunk_tokens, /*head_trainable=*/!lora);
  const std::int64_t forward_end = edge_activation_bytes(s, micro_batch, seq_len, d) + m.logits + mask;
  const std::int64_t top_attention_backward = attention_backward_bytes(s, micro_batch, seq_len, attention);
  m.activations_full = s.layers * layer + std::max(forward_end, top_attention_backward);
  // Each checkpointed layer keeps its input; offloaded (on a GPU), the inputs wait in host memory
  // and two are on the device: the one of the layer being recomputed and the one copied back
  // ahead for the layer below (model/offloaded_inputs.h); one without train.offload_prefetch.
  const std::int64_t layer_input = micro_batch * seq_len * s.hidden * d;
  const bool offloaded = run.train.offload_activations && !cpu;
  m.host_activations = offloaded && run.train.activation_checkpointing ? s.layers * layer_input : 0;
  m.activations_checkpointed = (offloaded ? std::min<std::int64_t>(run.train.offload_prefetch ? 2 : 1, s.layers) : s.layers) * layer_input +
                               std::max(forward_end, layer + top_attention_backward + mask);
  m.activations = run.train.activation_checkpointing ? m.activations_checkpointed : m.activations_full;
  m.overhead = cpu ? 0 : kFrameworkOverhead;
  return m;
}

// The largest seq in [1, kLongestPlannedSequence] with bytes(seq) <= capacity (0: none), for bytes
// that never fall as the sequence grows: doubling (the limit is a power of two, so doubling from 1
// reaches it exactly), then bisection between the last length that fit and the first that did not.
static_assert((kLongestPlannedSequence & (kLongestPlannedSequence - 1)) == 0, "a power of two");
template <typename BytesAt>
std::int64_t longest_fitting_sequence(const BytesAt& bytes, std::int64_t capacity) {
  std::int64_t fits = 0, fails = 1;
  while (fails <= kLongestPlannedSequence && bytes(fails) <= capacity) {
    fits = fails;
    fails *= 2;
  }
  if (fits == kLongestPlannedSequence) return fits;
  while (fails - fits > 1) {
    const std::int64_t mid = fits + (fails - fits) / 2;
    (bytes(mid) <= capacity ? fits : fails) = mid;
  }
  return fits;
}

MemoryPlan plan_memory(const config::RunConfig& run, const io::LlamaConfig& model, const PlanOptions& options) {
  FT_CHECK(options.gpus > 0, "--gpus must be positive, got ", options.gpus);
  FT_CHECK(options.micro_batch >= 0, "--micro-batch must be positive, got ", options.micro_batch);
  FT_CHECK(options.gpu_mem_gb > 0, "--gpu-mem-gb must be positive, got ", options.gpu_mem_gb);
  MemoryPlan plan;
  plan.options = options;
  plan.seq_len = options.seq_len > 0 ? options.seq_len : run.data.max_seq_len;
  plan.attention = planned_attention(options.attention.empty() ? run.model.attention : options.attention);
  const Shapes s = shapes_of(model);
  plan.parameters = s.params;
  plan.lora_parameters = lora_parameters(s, lora_setup(run).options, nullptr);
  const std::int64_t capacity = static_cast<std::int64_t>(options.gpu_mem_gb * 1e9 * (1 - options.headroom));
  const std::int64_t global = run.train.global_batch_size;

  std::vector<std::pair<config::Strategy, bool>> rows = {{lora_setup(run).strategy, true}};
  for (std::size_t i = 0; i < config::choice_names<config::Strategy>().size(); ++i)
    rows.emplace_back(static_cast<config::Strategy>(i), false);
  for (const auto& entry : rows) {
    const config::Strategy strategy = entry.first;  // not a structured binding: the lambdas capture these
    const bool lora = entry.second;
    StrategyPlan p;
    p.name = (lora ? "lora+" : "") + config::choice_name(strategy);
    p.strategy = strategy;
    p.lora = lora;
    auto at = [&](std::int64_t b) {
      return memory_for(run, model, strategy, lora, b, plan.seq_len, options.gpus, plan.attention, options.cpu);
    };
    if (options.micro_batch > 0) {
      p.micro_batch = at(options.micro_batch).total() <= capacity ? options.micro_batch : 0;
    } else {
      for (std::int64_t b = 1; b <= options.max_micro_batch && at(b).total() <= capacity; ++b) p.micro_batch = b;
    }
    p.fits = p.micro_batch > 0;
    p.at_micro_batch = at(std::max<std::int64_t>(p.micro_batch, 1));
    // The accumulation for the global batch: with the largest micro-batch that divides it, or
    // else the nearest global batch that a fitting micro-batch divides.
    const std::int64_t largest = std::max<std::int64_t>(p.micro_batch, 1);
    p.global_batch = global;
    std::int64_t micro = 0;
    for (std::int64_t b = largest; b >= (options.micro_batch > 0 ? largest : 1); --b)
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
    p.max_seq_len = longest_fitting_sequence(
        [&](std::int64_t seq) {
          return memory_for(run, model, strategy, lora, 1, seq, options.gpus, plan.attention, options.cpu).total();
        },
        capacity);
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
