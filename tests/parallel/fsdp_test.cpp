// FSDP in one process on a small random LLaMA: step for step DDP's results (with and without
// activation checkpointing, with accumulation, with offload, with any prefetch), the layers'
// parameters whole only around their use and the prefetched ones (released between forward and
// backward, but for the last layer under prefetch, and after it), the memory report,
// the full parameters streamed one unit at a time, and weight decay on norms as configured.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <map>

#include "model/causal_lm_loss.h"
#include "model/llama_model.h"
#include "parallel/ddp_strategy.h"
#include "parallel/fsdp_strategy.h"
#include "test_support.h"

namespace ft::parallel {
namespace {

io::LlamaConfig small_config(bool tied = false) {
  io::LlamaConfig c;
  c.vocab_size = 64;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.tie_word_embeddings = tied;
  return c;
}

struct TrainRun {
  std::vector<double> losses;
  std::vector<std::pair<std::string, at::Tensor>> weights;
  MemoryReport memory;
};

// 4 steps of 2 micro-batches of random tokens, every parameter trained.
TrainRun train_fsdp(const std::string& strategy, bool checkpointing, bool offload = false, bool tied = false,
          bool decay_norms = false, const std::function<void(FsdpStrategy&)>& probe = {}, std::size_t prefetch = 1,
          bool reshard_after_forward = true) {
  model::LlamaForCausalLM m(small_config(tied), torch::TensorOptions().dtype(torch::kFloat));
  model::init_weights(m, 3);
  NamedParameters params;
  std::vector<at::Tensor> tensors;
  for (auto& p : m->named_parameters()) {
    p.value().set_requires_grad(true);
    params.emplace_back(p.key(), p.value());
    tensors.push_back(p.value());
  }
  auto comm = comm::make_single_process_communicator();
  StrategyOptions options;
  options.adamw.weight_decay = 0.1;
  options.decay_norms = decay_norms;
  options.offload_optimizer = offload;
  options.fsdp_prefetch = prefetch;
  options.fsdp_reshard_after_forward = reshard_after_forward;
  std::unique_ptr<ParallelStrategy> s;
  if (strategy == "ddp") s = std::make_unique<DdpStrategy>(*comm, options);
  if (strategy == "fsdp") s = std::make_unique<FsdpStrategy>(*comm, options);
  s->setup(params, model::decoder_layers_of(m, tensors));
  torch::manual_seed(5);
  TrainRun run;
  for (int step = 0; step < 4; ++step) {
    double loss_sum = 0;
    for (int micro = 0; micro < 2; ++micro) {
      s->before_backward(micro == 1);
      s->before_forward();
      const at::Tensor ids = torch::randint(64, {2, 12}, torch::kLong);
      model::ForwardOptions fo;
      fo.layer_runner = s->layer_runner(checkpointing);
      model::LossSum loss = model::causal_lm_loss(m(ids, fo), ids);
      if (probe) probe(dynamic_cast<FsdpStrategy&>(*s));
      (loss.sum / 44.0).backward();
      loss_sum += loss.sum.item<double>();
    }
    s->finish_gradients();
    if (probe) probe(dynamic_cast<FsdpStrategy&>(*s));
    run.losses.push_back(loss_sum);
    const double norm = std::sqrt(s->grad_sum_of_squares());
    s->step(1e-2, std::min(1.0, 1.0 / (norm + 1e-6)));
  }
  s->for_each_full_parameter([&](const std::string& name, const at::Tensor& t) { run.weights.emplace_back(name, t.clone()); });
  run.memory = s->memory();
  return run;
}

void expect_same(const TrainRun& a, const TrainRun& b) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (std::size_t i = 0; i < a.losses.size(); ++i) EXPECT_NEAR(a.losses[i], b.losses[i], 1e-6 * std::abs(b.losses[i]));
  ASSERT_EQ(a.weights.size(), b.weights.size());
  for (std::size_t i = 0; i < a.weights.size(); ++i) {
    EXPECT_EQ(a.weights[i].first, b.weights[i].first);
    EXPECT_TRUE(torch::allclose(a.weights[i].second, b.weights[i].second, 1e-5, 1e-7)) << a.weights[i].first;
  }
}

TEST(FsdpStrategy, OneRankEqualsDdpWithAndWithoutCheckpointingAndOffload) {
  const TrainRun ddp = train_fsdp("ddp", false);
  ASSERT_EQ(ddp.weights.size(), 3u * 9 + 3);  // 9 tensors per layer; embeddings, norm, lm_head
  for (bool checkpointing : {false, true}) {
    for (bool offload : {false, true}) {
      SCOPED_TRACE(std::string(checkpointing ? "checkpointing" : "plain") + (offload ? ", offload" : ""));
      expect_same(train_fsdp("fsdp", checkpointing, offload), ddp);
    }
    for (std::size_t prefetch : {0, 2, 64}) {
      SCOPED_TRACE(std::string(checkpointing ? "checkpointing" : "plain") + ", prefetch " + std::to_string(prefetch));
      expect_same(train_fsdp("fsdp", checkpointing, false, false, false, {}, prefetch), ddp);
    }
    for (std::size_t prefetch : {0, 1}) {
      SCOPED_TRACE(std::string(checkpointing ? "checkpointing" : "plain") + ", no resharding after forward, prefetch " +
                   std::to_string(prefetch));
      expect_same(train_fsdp("fsdp", checkpointing, false, false, false, {}, prefetch, /*reshard_after_forward=*/false),
                  ddp);
    }
  }
  SCOPED_TRACE("tied embeddings");
  expect_same(train_fsdp("fsdp", false, false, /*tied=*/true), train_fsdp("ddp", false, false, true));
}

// What a probe sees after each micro-batch's forward and after finish_gradients, over
// train_fsdp's 4 steps (two forwards and a finish each): the units whole, and the gathers issued
// at their use since the previous probe.
struct GatherTrace {
  std::vector<std::size_t> whole, at_use;
};
GatherTrace trace_gathers(bool checkpointing, std::size_t prefetch, bool reshard_after_forward) {
  GatherTrace trace;
  train_fsdp("fsdp", checkpointing, false, false, false,
             [&](FsdpStrategy& s) {
               trace.whole.push_back(s.gathered_units());
               trace.at_use.push_back(s.take_gathers_at_use());
             },
             prefetch, reshard_after_forward);
  return trace;
}

TEST(FsdpStrategy, LayersAreWholeOnlyAroundTheirUseAndPrefetched) {
  // The probe runs after each micro-batch's forward (the loss computed, backward not yet run) and
  // after finish_gradients. Without prefetch only the root unit is whole at both points, and each
  // of the 3 layers is gathered where it is used, in forward and again in backward. With prefetch
  // the last layer stays whole from its forward to its backward, and only layer 0's forward
  // gathers at its use: every other gather was issued ahead.
  for (bool checkpointing : {false, true}) {
    for (std::size_t prefetch : {0, 1, 2}) {
      SCOPED_TRACE(std::string(checkpointing ? "checkpointing" : "plain") + ", prefetch " + std::to_string(prefetch));
      const auto [whole, at_use] = trace_gathers(checkpointing, prefetch, /*reshard_after_forward=*/true);
      ASSERT_EQ(whole.size(), 4u * 3);  // 4 steps: two forwards and a finish each
      for (std::size_t i = 0; i < whole.size(); ++i) {
        const bool after_forward = i % 3 != 2;
        SCOPED_TRACE(i);
        EXPECT_EQ(whole[i], after_forward && prefetch > 0 ? 2u : 1u);
        const std::size_t forward = prefetch > 0 ? 1 : 3, backward = prefetch > 0 ? 0 : 3;
        EXPECT_EQ(at_use[i], i % 3 == 0 ? forward : i % 3 == 1 ? backward + forward : backward);
      }
    }
  }
}

TEST(FsdpStrategy, WithoutReshardingAfterForwardEveryLayerStaysWholeUntilItsBackward) {
  // After each forward the root unit and all 3 layers are whole; backward gathers nothing, and
  // after finish_gradients only the root unit is left. Each forward gathers the layers once: at
  // their use without prefetch, only layer 0 at its use with it.
  for (bool checkpointing : {false, true}) {
    for (std::size_t prefetch : {0, 1}) {
      SCOPED_TRACE(std::string(checkpointing ? "checkpointing" : "plain") + ", prefetch " + std::to_string(prefetch));
      const auto [whole, at_use] = trace_gathers(checkpointing, prefetch, /*reshard_after_forward=*/false);
      ASSERT_EQ(whole.size(), 4u * 3);
      for (std::size_t i = 0; i < whole.size(); ++i) {
        SCOPED_TRACE(i);
        EXPECT_EQ(whole[i], i % 3 != 2 ? 4u : 1u);
        EXPECT_EQ(at_use[i], i % 3 == 2 ? 0u : prefetch > 0 ? 1u : 3u);
      }
    }
  }
}

TEST(FsdpStrategy, MemoryReportCountsShardsAndTheGatheredUnits) {
  const TrainRun fsdp = train_fsdp("fsdp", false);
  std::int64_t psi = 0, root = 0, largest_layer = 0;
  std::map<std::string, std::int64_t> layer_numel;
  for (const auto& [name, t] : fsdp.weights) {
    psi += t.numel();
    if (name.rfind("model.layers.", 0) == 0) {
      layer_numel[name.substr(0, name.find('.', 13))] += t.numel();
    } else {
      root += t.numel();
    }
  }
  for (const auto& [layer, n] : layer_numel) largest_layer = std::max(largest_layer, n);
  // One rank: the "shard" is everything (fp32: the parameters are the master, m and v 8 bytes).
  EXPECT_EQ(fsdp.memory.parameters, psi * 4);
  EXPECT_EQ(fsdp.memory.gradients, psi * 4);
  EXPECT_EQ(fsdp.memory.optimizer, psi * 8);
  // At peak: the root unit and at most 2 + prefetch layers (the one in use, the one above it
  // until its gradients are handed off, the prefetched ones).
  EXPECT_GE(fsdp.memory.gathered, (root + 2 * largest_layer) * 4);
  EXPECT_LE(fsdp.memory.gathered, (root + 3 * largest_layer) * 4);
  const TrainRun at_use = train_fsdp("fsdp", false, false, false, false, {}, /*prefetch=*/0);
  EXPECT_GE(at_use.memory.gathered, (root + largest_layer) * 4);
  EXPECT_LE(at_use.memory.gathered, (root + 2 * largest_layer) * 4);
  // Without resharding after forward: every layer at the end of forward.
  const TrainRun kept = train_fsdp("fsdp", false, false, false, false, {}, 1, /*reshard_after_forward=*/false);
  EXPECT_EQ(kept.memory.gathered, psi * 4);
}

TEST(FsdpStrategy, WeightDecayOnNormsOnlyWhenAsked) {
  // The segments: matrices decay, 1-D parameters (norm weights) and padding only with decay_norms.
  const std::vector<FlatSlot> slots = {{"w", 0, 6, {2, 3}}, {"norm", 8, 3, {3}}};
  for (bool decay_norms : {false, true}) {
    const auto segments = decay_segments(slots, 12, decay_norms);
    ASSERT_EQ(segments.size(), 4u);
    EXPECT_TRUE(segments[0].decay);                 // w
    EXPECT_FALSE(segments[1].decay);                // padding between
    EXPECT_EQ(segments[2].decay, decay_norms);      // norm
    EXPECT_FALSE(segments[3].decay);                // tail padding
  }
  // Through the strategies: a different run, the same in FSDP and DDP.
  const TrainRun off = train_fsdp("fsdp", false), on = train_fsdp("fsdp", false, false, false, /*decay_norms=*/true);
  EXPECT_FALSE(torch::equal(off.weights.back().second, on.weights.back().second));
  expect_same(on, train_fsdp("ddp", false, false, false, true));
}

TEST(FsdpStrategy, MakeStrategyKnowsEveryStrategy) {
  auto comm = comm::make_single_process_communicator();
  config::RunConfig c;
  for (const std::string& name : config::choice_names<config::Strategy>()) {
    c.parallel.strategy = config::parse_choice<config::Strategy>(name, "parallel.strategy");
    EXPECT_EQ(make_strategy(c, *comm)->name(), name);
  }
}

}  // namespace
}  // namespace ft::parallel
