#include "parallel/strategy_traits.h"

namespace ft::parallel {

StrategyTraits strategy_traits(config::Strategy strategy) {
  StrategyTraits t;
  switch (strategy) {
    case config::Strategy::kDdp:
      break;
    case config::Strategy::kZero1:
      t.shards_optimizer = t.separate_master = true;
      break;
    case config::Strategy::kZero2:
      t.shards_optimizer = t.shards_gradients = t.separate_master = true;
      t.grad_buckets_in_flight = 3;  // reduce-scatter of one, copy-out of another, the next filling
      break;
    case config::Strategy::kFsdp:
      t.shards_optimizer = t.shards_gradients = t.shards_parameters = t.loads_model_on_host = true;
      break;
  }
  return t;
}

}  // namespace ft::parallel
