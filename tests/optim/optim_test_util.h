// Shared by the optim tests: tests/data/optim_reference.json (made by
// tests/reference/make_optim_reference.py from PyTorch 1.13), loaded once, and the error measure.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "test_support.h"

namespace ft::optim::test {

inline const Json& reference() {
  static const Json ref = parse_json_file(ft::test::data_path("optim_reference.json"));
  return ref;
}

// A reference number that may be "inf", "-inf" or "nan" (JSON has none of them).
inline double number(const Json& j) {
  if (j.is_string()) return j == "nan" ? std::nan("") : (j == "inf" ? INFINITY : -INFINITY);
  return j.get<double>();
}

// A JSON array of such numbers (exact fp32 values) as a 1-D fp32 tensor.
inline torch::Tensor vec(const Json& values) {
  std::vector<float> out;
  for (const Json& v : values) out.push_back(static_cast<float>(number(v)));
  return torch::tensor(out, torch::kFloat);
}

// max_i |a_i - b_i| / max(|b_i|, 1e-6 * max_j |b_j|): relative per element, except that elements
// a million times smaller than the tensor's largest are measured against that floor (a relative
// error of an almost-cancelled value says nothing about the optimizer).
inline double max_rel_error(const torch::Tensor& actual, const torch::Tensor& expected) {
  const auto a = actual.to(torch::kDouble), b = expected.to(torch::kDouble);
  const double floor = std::max(1e-6 * b.abs().max().item<double>(), 1e-30);
  return ((a - b).abs() / b.abs().clamp_min(floor)).max().item<double>();
}

}  // namespace ft::optim::test
