#include "config/choices.h"

#include "util/error.h"

namespace ft::config {

template <>
const std::vector<std::string>& choice_names<Strategy>() {
  static const std::vector<std::string> names = {"ddp", "zero1", "zero2", "fsdp"};
  return names;
}
template <>
const std::vector<std::string>& choice_names<Backend>() {
  static const std::vector<std::string> names = {"auto", "gloo", "nccl"};
  return names;
}
template <>
const std::vector<std::string>& choice_names<Precision>() {
  static const std::vector<std::string> names = {"fp32", "bf16", "fp16"};
  return names;
}
template <>
const std::vector<std::string>& choice_names<WeightDtype>() {
  static const std::vector<std::string> names = {"auto", "fp32", "bf16", "fp16"};
  return names;
}
template <>
const std::vector<std::string>& choice_names<LossScaling>() {
  static const std::vector<std::string> names = {"auto", "dynamic", "none"};
  return names;
}
template <>
const std::vector<std::string>& choice_names<OnNonfinite>() {
  static const std::vector<std::string> names = {"stop", "skip"};
  return names;
}
template <>
const std::vector<std::string>& choice_names<ResumeMode>() {
  static const std::vector<std::string> names = {"auto", "none"};
  return names;
}

template <>
const std::vector<std::string>& choice_names<Quantization>() {
  static const std::vector<std::string> names = {"none", "int8", "nf4"};
  return names;
}
template <>
const std::vector<std::string>& choice_names<LrSchedule>() {
  static const std::vector<std::string> names = {"constant", "linear", "cosine"};
  return names;
}
template <>
const std::vector<std::string>& choice_names<RecordFormat>() {
  static const std::vector<std::string> names = {"alpaca", "prompt_completion", "text", "chat", "sharegpt"};
  return names;
}
template <>
const std::vector<std::string>& choice_names<TooLong>() {
  static const std::vector<std::string> names = {"truncate", "drop"};
  return names;
}
template <>
const std::vector<std::string>& choice_names<OnBadRecord>() {
  static const std::vector<std::string> names = {"error", "skip"};
  return names;
}

template <class E>
E parse_choice(const std::string& name, const std::string& key) {
  const std::vector<std::string>& names = choice_names<E>();
  std::string allowed;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return static_cast<E>(i);
    allowed += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  }
  FT_CHECK(false, key, ": expected ", allowed, ", got \"", name, "\"");
  return E{};
}

template Strategy parse_choice<Strategy>(const std::string&, const std::string&);
template Backend parse_choice<Backend>(const std::string&, const std::string&);
template Precision parse_choice<Precision>(const std::string&, const std::string&);
template WeightDtype parse_choice<WeightDtype>(const std::string&, const std::string&);
template LossScaling parse_choice<LossScaling>(const std::string&, const std::string&);
template OnNonfinite parse_choice<OnNonfinite>(const std::string&, const std::string&);
template ResumeMode parse_choice<ResumeMode>(const std::string&, const std::string&);
template Quantization parse_choice<Quantization>(const std::string&, const std::string&);
template LrSchedule parse_choice<LrSchedule>(const std::string&, const std::string&);
template RecordFormat parse_choice<RecordFormat>(const std::string&, const std::string&);
template TooLong parse_choice<TooLong>(const std::string&, const std::string&);
template OnBadRecord parse_choice<OnBadRecord>(const std::string&, const std::string&);

}  // namespace ft::config
