// The element types ft reads and writes: safetensors dtype names ("BF16"), LibTorch scalar
// types, and the names users write in configs ("bf16", "bfloat16").
#pragma once

#include <c10/core/ScalarType.h>

#include <cstddef>
#include <optional>
#include <string>

#include "config/choices.h"

namespace ft::io {

struct SafetensorsDType {
  const char* name;                        // as in the safetensors header: "F32"
  std::size_t bits;                        // bits per element (4-bit types exist)
  std::optional<c10::ScalarType> scalar;  // nullopt when this LibTorch cannot hold it
};

// nullptr when `name` is not a safetensors dtype at all.
const SafetensorsDType* find_safetensors_dtype(const std::string& name);
// Comma-separated list of every dtype name, for "expected one of" messages.
std::string known_safetensors_dtypes();
// "F32" for kFloat, ...; throws ft::Error for types safetensors cannot represent.
const char* safetensors_dtype_name(c10::ScalarType type);

// "fp32"|"float32" -> kFloat, "bf16"|"bfloat16" -> kBFloat16, "fp16"|"float16" -> kHalf;
// throws ft::Error naming `what` (a key path or flag) otherwise.
c10::ScalarType parse_float_dtype(const std::string& name, const std::string& what);
// The LibTorch type of a config precision (train.precision, parallel.grad_comm_dtype).
c10::ScalarType scalar_type(config::Precision precision);
// "float32", "bfloat16", "float16": the spelling HF config.json uses for torch_dtype.
std::string hf_dtype_name(c10::ScalarType type);

}  // namespace ft::io
