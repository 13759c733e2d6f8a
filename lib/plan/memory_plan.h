// The memory and batch planner behind ft_plan: from a run config and the model's config.json
// alone (no weights), the bytes each GPU holds under each strategy, whether that fits, the
// largest micro-batch that does, and the accumulation steps for the global batch.
//
// Model state is counted exactly as the strategies hold it (docs/memory.md): for a
// full fine-tune in mixed precision d bytes of weights and gradients per parameter and 12 of
// fp32 master + AdamW moments, sharded per ZeRO stage; for LoRA the frozen base in the compute
// dtype (or int8 / NF4, model/quantization.h) plus fp32 LoRA weights, gradients and moments.
// Activations are counted per token and per layer from the tensors our LLaMA keeps for backward
// (eager attention keeps the s² scores, sdpa's fused kernels do not), with and without
// activation checkpointing, plus the logits and their fp32 loss buffers (one chunk of target
// tokens of them with train.loss_chunk_tokens). A fixed framework overhead (CUDA context, cuBLAS and
// NCCL workspaces) is added per GPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "io/hf_config.h"
#include "model/attention.h"

namespace ft::plan {

struct PlanOptions {
  std::int64_t gpus = 1;
  double gpu_mem_gb = 24;      // usable bytes per GPU = gpu_mem_gb · 1e9
  std::int64_t seq_len = 0;    // 0: the config's data.max_seq_len
  std::int64_t max_micro_batch = 64;
  // > 0: plan every strategy at this micro-batch (e.g. the config's) instead of searching for the
  // largest that fits.
  std::int64_t micro_batch = 0;
  // A plan fits when its total stays under (1 - headroom) of the GPU: the caching allocator's
  // fragmentation and what the estimate does not see need room.
  double headroom = 0.05;
  // The attention kernel to plan for: "sdpa", "eager", "auto" (sdpa where this build's LibTorch
  // has it); empty = the config's model.attention.
  std::string attention;
  // Plan for training on the CPU (the tiny model, the tests that measure the plan): no framework
  // overhead, and dropout keeps fp32 noise instead of CUDA's byte-per-element mask.
  bool cpu = false;
};

// Per GPU, in bytes, for one micro-batch size.
struct MemoryBreakdown {
  std::int64_t weights = 0;          // trainable or frozen, in the form held (quantized base included)
  std::int64_t gradients = 0;
  std::int64_t optimizer = 0;        // on the device (0 with offload_optimizer)
  std::int64_t host_optimizer = 0;   // in host memory per rank (offload_optimizer)
  std::int64_t comm_buckets = 0;     // gradient buckets / FSDP gradient staging in flight
  std::int64_t gathered = 0;         // FSDP: units whole at once; quantized base: one dequantized matrix
  std::int64_t gathered_resident = 0;  // the part of `gathered` whole between steps too (FSDP's root unit)
  std::int64_t host_batches = 0;     // host memory per rank: the batches prefetched and in training
  std::int64_t host_activations = 0;  // host memory per rank: checkpointed layers' inputs (train.offload_activations)
  // Host memory of rank 0 for a background save (checkpoint.async): its shard of fp32 master
  // weights and AdamW moments (12 bytes per trainable parameter / W) and the gathered weights.
  std::int64_t host_checkpoint = 0;
  std::int64_t activations = 0;      // with the config's activation checkpointing setting
  std::int64_t activations_checkpointed = 0;
  std::int64_t activations_full = 0;
  // The part of the activations that scales with the vocabulary: the output head's logits and the
  // loss's fp32 buffers at the end of the forward, for the whole sequence, or with
  // train.loss_chunk_tokens for one chunk of target tokens (and the head's weight gradient that
  // chunked backward accumulates while the chunk's logits are alive).
  std::int64_t logits = 0;
  std::int64_t overhead = 0;         // framework (CUDA context, workspaces)

  std::int64_t model_state() const { return weights + gradients + optimizer; }
  // Held between steps on the device: what a run's metrics.jsonl memory_bytes shows.
  std::int64_t held_between_steps() const { return model_state() + gathered_resident; }
  std::int64_t total() const { return model_state() + comm_buckets + gathered + activations + overhead; }
};

struct StrategyPlan {
  std::string name;             // "ddp", "zero1", "zero2", "fsdp" (full fine-tune) or "lora+<strategy>"
  config::Strategy strategy = config::Strategy::kDdp;
  bool lora = false;
  MemoryBreakdown at_micro_batch;  // at the chosen micro-batch (1 when nothing fits)
  bool fits = false;
  std::int64_t micro_batch = 0;    // the largest that fits (0: none)
  std::int64_t grad_accum = 0;     // global / (micro · gpus) for the batch below
  std::int64_t global_batch = 0;   // the config's, or the nearest that divides (see note)
  std::string note;                // why the batch values differ from the config's, if they do
  // The longest sequence whose step fits at micro-batch 1 (with the config's activation
  // checkpointing and attention kernel; 0: not even one token), up to kLongestPlannedSequence.
  std::int64_t max_seq_len = 0;
};

// Where the search for StrategyPlan::max_seq_len stops (16M tokens; a power of two).
constexpr std::int64_t kLongestPlannedSequence = std::int64_t{1} << 24;

struct MemoryPlan {
  std::int64_t parameters = 0;         // Ψ, a tied embedding counted once
  std::int64_t lora_parameters = 0;    // Ψ_L of the LoRA row
  std::int64_t seq_len = 0;
  model::AttentionKernel attention = model::AttentionKernel::kEager;  // what the plan assumes
  PlanOptions options;
  std::vector<StrategyPlan> strategies;  // the LoRA row first, then ddp, zero1, zero2, fsdp
  std::string recommendation;            // one sentence
};

MemoryPlan plan_memory(const config::RunConfig& run, const io::LlamaConfig& model, const PlanOptions& options);

// The kernel a plan assumes for an attention setting: "sdpa", "eager", or "auto" = sdpa where
// this build's LibTorch has it (the kernel itself need not exist here: ft_plan on a laptop plans
// a GPU box's run).
model::AttentionKernel planned_attention(const std::string& name);

// The breakdown for one strategy and micro-batch (what plan_memory searches over).
MemoryBreakdown memory_for(const config::RunConfig& run, const io::LlamaConfig& model, config::Strategy strategy,
                           bool lora, std::int64_t micro_batch, std::int64_t seq_len, std::int64_t gpus,
                           model::AttentionKernel attention, bool cpu = false);

}  // namespace ft::plan
