#include "model/linear.h"

#include <torch/torch.h>

namespace ft::model {

LinearImpl::LinearImpl(std::int64_t in_features, std::int64_t out_features,
                       const torch::TensorOptions& options)
    : in_features_(in_features), out_features_(out_features) {
  weight = register_parameter("weight", torch::empty({out_features, in_features}, options));
}

torch::Tensor LinearImpl::forward(const torch::Tensor& x) { return torch::nn::functional::linear(x, weight); }

EmbeddingImpl::EmbeddingImpl(std::int64_t vocab_size, std::int64_t dim, const torch::TensorOptions& options) {
  weight = register_parameter("weight", torch::empty({vocab_size, dim}, options));
}

torch::Tensor EmbeddingImpl::forward(const torch::Tensor& ids) { return torch::embedding(weight, ids); }

}  // namespace ft::model
