#include "io/dtype.h"

#include "util/error.h"

namespace ft::io {
namespace {

using c10::ScalarType;

// Every dtype of safetensors' Dtype enum (safetensors/src/tensor.rs); the ones LibTorch 1.13
// has no type for can be listed and skipped but not loaded.
const SafetensorsDType kDTypes[] = {
    {"BOOL", 8, ScalarType::Bool},      {"U8", 8, ScalarType::Byte},
    {"I8", 8, ScalarType::Char},        {"I16", 16, ScalarType::Short},
    {"I32", 32, ScalarType::Int},       {"I64", 64, ScalarType::Long},
    {"F16", 16, ScalarType::Half},      {"BF16", 16, ScalarType::BFloat16},
    {"F32", 32, ScalarType::Float},     {"F64", 64, ScalarType::Double},
    {"U16", 16, std::nullopt},          {"U32", 32, std::nullopt},
    {"U64", 64, std::nullopt},          {"F8_E5M2", 8, std::nullopt},
    {"F8_E4M3", 8, std::nullopt},       {"F8_E8M0", 8, std::nullopt},
    {"F6_E2M3", 6, std::nullopt},       {"F6_E3M2", 6, std::nullopt},
    {"F4", 4, std::nullopt},            {"C64", 64, std::nullopt},
};

}  // namespace

const SafetensorsDType* find_safetensors_dtype(const std::string& name) {
  for (const auto& d : kDTypes)
    if (name == d.name) return &d;
  return nullptr;
}

std::string known_safetensors_dtypes() {
  std::string out;
  for (const auto& d : kDTypes) {
    if (!out.empty()) out += ", ";
    out += d.name;
  }
  return out;
}

const char* safetensors_dtype_name(c10::ScalarType type) {
  for (const auto& d : kDTypes)
    if (d.scalar && *d.scalar == type) return d.name;
  FT_CHECK(false, "cannot store a tensor of type ", c10::toString(type), " in safetensors");
  return nullptr;
}

c10::ScalarType parse_float_dtype(const std::string& name, const std::string& what) {
  if (name == "fp32" || name == "float32") return ScalarType::Float;
  if (name == "bf16" || name == "bfloat16") return ScalarType::BFloat16;
  if (name == "fp16" || name == "float16") return ScalarType::Half;
  FT_CHECK(false, what, ": expected fp32, bf16 or fp16, got \"", name, "\"");
  return ScalarType::Float;
}

std::string hf_dtype_name(c10::ScalarType type) {
  switch (type) {
    case ScalarType::Float: return "float32";
    case ScalarType::BFloat16: return "bfloat16";
    case ScalarType::Half: return "float16";
    default: FT_CHECK(false, "no HF torch_dtype name for ", c10::toString(type));
  }
  return "";
}

c10::ScalarType scalar_type(config::Precision precision) {
  switch (precision) {
    case config::Precision::kFp32: return c10::ScalarType::Float;
    case config::Precision::kBf16: return c10::ScalarType::BFloat16;
    case config::Precision::kFp16: return c10::ScalarType::Half;
  }
  return c10::ScalarType::Float;
}

}  // namespace ft::io
