// What each data-parallel strategy shards and holds, known without constructing one: the memory
// planner's terms (plan/memory_plan.cpp) and the model loader's placement (train/model_setup.cpp)
// ask here instead of comparing strategy names. A new strategy adds its row here and its line in
// make_strategy (parallel_strategy.cpp).
#pragma once

#include "config/choices.h"

namespace ft::parallel {

struct StrategyTraits {
  bool shards_optimizer = false;   // AdamW state split over ranks (ZeRO-1, ZeRO-2, FSDP)
  bool shards_gradients = false;   // each rank keeps only its gradient shard (ZeRO-2, FSDP)
  bool shards_parameters = false;  // each rank holds only its parameter shard and gathers units (FSDP)
  // An fp32 master copy of the (sharded) weights beside the parameters even in fp32 (ZeRO-1/2:
  // the parameters stay whole, the master is the shard); FSDP's fp32 shard is its own master.
  bool separate_master = false;
  int grad_buckets_in_flight = 2;  // gradient buckets reduced while backward fills the next
  // The model is loaded on the host and the strategy moves only this rank's shards to the device.
  bool loads_model_on_host = false;
};

StrategyTraits strategy_traits(config::Strategy strategy);

}  // namespace ft::parallel
