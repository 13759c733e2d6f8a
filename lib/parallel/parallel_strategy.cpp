#include "parallel/parallel_strategy.h"

#include "model/activation_checkpoint.h"

namespace ft::parallel {

model::LayerRunner ParallelStrategy::layer_runner(bool activation_checkpointing) {
  if (activation_checkpointing) return model::activation_checkpointing_runner();
  return {};
}

}  // namespace ft::parallel
