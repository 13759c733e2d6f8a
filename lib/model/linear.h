// A bias-free linear layer y = x W^T with HF's parameter name ("weight", shape [out, in]).
// Parameters are created uninitialized in the requested dtype/device (weights are loaded or
// initialized explicitly), so building a 13B model never allocates an fp32 copy first.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

namespace ft::model {

class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(std::int64_t in_features, std::int64_t out_features, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& x);

  std::int64_t in_features() const { return in_features_; }
  std::int64_t out_features() const { return out_features_; }

  torch::Tensor weight;  // [out, in]

 private:
  std::int64_t in_features_;
  std::int64_t out_features_;
};
TORCH_MODULE(Linear);

// Token embedding table, HF name "weight", shape [vocab, hidden].
class EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(std::int64_t vocab_size, std::int64_t dim, const torch::TensorOptions& options);
  torch::Tensor forward(const torch::Tensor& ids);  // ids [B,T] -> [B,T,dim]

  torch::Tensor weight;
};
TORCH_MODULE(Embedding);

}  // namespace ft::model
