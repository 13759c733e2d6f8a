// RMSNorm as HF's LlamaRMSNorm: normalize in fp32, cast back to the input dtype, then scale by
// the weight ("weight", shape [hidden]).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

namespace ft::model {

class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(std::int64_t hidden_size, double eps, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor weight;
  double eps;
};
TORCH_MODULE(RMSNorm);

}  // namespace ft::model
