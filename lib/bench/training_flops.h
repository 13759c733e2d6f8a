// The model FLOPs of one trained token, for ft_bench's achieved FLOP/s and MFU (model FLOPs
// utilization: activation checkpointing's recomputation is not counted, as in PaLM's MFU).
// PaLM (appendix B): 6N + 12·L·H·Q·T, with N the parameters that multiply (each decoder layer's
// projections and the output head; the embedding lookup multiplies nothing) and L·H·Q·T the
// attention's score and value products. A LoRA run does not compute the frozen weights'
// gradients: 4N for the base (forward and the input gradient) plus 6 per LoRA parameter.
#pragma once

#include <cstdint>

#include "io/hf_config.h"

namespace ft::bench {

// N: parameters in matrix products per token (layers' projections + output head).
std::int64_t matmul_parameters(const io::LlamaConfig& model);

// FLOPs per trained token at `seq_len` tokens per sequence; lora_parameters 0 = full fine-tune.
double training_flops_per_token(const io::LlamaConfig& model, std::int64_t seq_len, std::int64_t lora_parameters);

}  // namespace ft::bench
