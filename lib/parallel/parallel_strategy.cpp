#include "parallel/parallel_strategy.h"

#include "util/error.h"

namespace ft::parallel {

model::LayerRunner ParallelStrategy::layer_runner(bool activation_checkpointing) {
  FT_CHECK(!activation_checkpointing, "train.activation_checkpointing is not implemented in this build yet");
  return {};
}

}  // namespace ft::parallel
