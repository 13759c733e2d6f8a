// The config's choices as enums, parsed once when the config loads (config/run_config.cpp) and
// named back for messages, metrics and the resolved config.json. Each enum's names, in value
// order, are its only spelling: the schema's "one of ..." list comes from them too.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ft::config {

enum class Strategy { kDdp, kZero1, kZero2, kFsdp };  // parallel.strategy
enum class Backend { kAuto, kGloo, kNccl };           // parallel.backend
enum class Precision { kFp32, kBf16, kFp16 };         // train.precision, parallel.grad_comm_dtype
enum class WeightDtype { kAuto, kFp32, kBf16, kFp16 };  // model.dtype: auto = train.precision
enum class LossScaling { kAuto, kDynamic, kNone };    // train.loss_scale: auto = dynamic for fp16
enum class OnNonfinite { kStop, kSkip };              // train.on_nonfinite
enum class ResumeMode { kAuto, kNone };               // checkpoint.resume
enum class Quantization { kNone, kInt8, kNf4 };       // model.quantize (model::Quantization)
enum class LrSchedule { kConstant, kLinear, kCosine };  // train.lr_schedule (optim::LrScheduleKind)
enum class RecordFormat { kAlpaca, kPromptCompletion, kText, kChat, kShareGpt };  // data.format (data::RecordFormat)
enum class TooLong { kTruncate, kDrop };              // data.too_long
enum class OnBadRecord { kError, kSkip };             // data.on_bad_record


// The names of E's values, index = value ("ddp", "zero1", ...).
template <class E>
const std::vector<std::string>& choice_names();

// The index of `name` among E's names, or -1.
template <class E>
int find_choice(const std::string& name) {
  const std::vector<std::string>& names = choice_names<E>();
  for (std::size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return static_cast<int>(i);
  return -1;
}

template <class E>
const std::string& choice_name(E value) {
  return choice_names<E>()[static_cast<std::size_t>(value)];
}

// The value named `name`; throws ft::Error naming `key` and the names allowed otherwise.
template <class E>
E parse_choice(const std::string& name, const std::string& key);

}  // namespace ft::config
