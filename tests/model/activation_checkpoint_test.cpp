// Activation checkpointing on the real TinyStories model: checkpointed and plain forward/backward
// give the same loss and the same gradient for every parameter (full fine-tune, fp32 and bf16;
// LoRA with dropout, which needs the RNG replay), parameters' gradient accumulators and their
// hooks run as in a plain backward (flat gradient buffer kept), evaluation is a plain forward, and
// a finite difference agrees with a gradient that went through the recomputation.
#include <gtest/gtest.h>

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>

#include <map>

#include "model/activation_checkpoint.h"
#include "model/causal_lm_loss.h"
#include "model/lora.h"
#include "model/model_loader.h"
#include "stories_model.h"
#include "test_support.h"

namespace ft::model {
namespace {

// Two rows of 24 token ids, the second right-padded with -100 labels, so that the attention
// bias has padding and the loss ignores positions.
struct Batch {
  torch::Tensor ids, labels, segments;
};

const Batch& batch() {
  static const Batch b = [] {
    auto gen = at::detail::createCPUGenerator(3);
    Batch r;
    r.ids = torch::randint(3, 512, {2, 24}, gen, torch::kLong);
    r.labels = r.ids.clone();
    r.labels.index_put_({1, torch::indexing::Slice(18)}, kIgnoreIndex);
    r.segments = torch::zeros({2, 24}, torch::kLong);
    r.segments.index_put_({1, torch::indexing::Slice(18)}, -1);
    return r;
  }();
  return b;
}

torch::Tensor mean_loss(LlamaForCausalLM& model, bool checkpointed, InputOffload offload = {}) {
  ForwardOptions o;
  o.segment_ids = batch().segments;
  if (checkpointed) o.layer_runner = activation_checkpointing_runner(offload);
  LossSum l = causal_lm_loss(model(batch().ids, o), batch().labels);
  return l.sum / static_cast<double>(l.tokens);
}

struct CheckpointRun {
  torch::Tensor loss;
  std::map<std::string, torch::Tensor> grads;  // of every parameter that requires grad
};

// One forward and backward from cleared gradients.
CheckpointRun run(LlamaForCausalLM& model, bool checkpointed, InputOffload offload = {}) {
  for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
  CheckpointRun r;
  r.loss = mean_loss(model, checkpointed, offload);
  r.loss.backward();
  for (const auto& item : model->named_parameters()) {
    if (!item.value().requires_grad()) continue;
    EXPECT_TRUE(item.value().grad().defined()) << item.key() << (checkpointed ? " (checkpointed)" : " (plain)");
    if (item.value().grad().defined()) r.grads[item.key()] = item.value().grad().clone();
  }
  return r;
}

// Bitwise: the recomputation runs the very same kernels on the very same inputs (and, for
// dropout, the same generator state), and each gradient is produced by the same ops in the same
// order as in the plain backward, so nothing can differ, not even in the last bit.
void expect_identical(const CheckpointRun& plain, const CheckpointRun& checkpointed) {
  EXPECT_TRUE(torch::equal(plain.loss, checkpointed.loss)) << plain.loss.item<double>() << " vs "
                                                           << checkpointed.loss.item<double>();
  ASSERT_EQ(plain.grads.size(), checkpointed.grads.size());
  for (const auto& [name, g] : plain.grads) {
    const auto& c = checkpointed.grads.at(name);
    EXPECT_TRUE(torch::equal(g, c)) << name << ": max |diff| " << test::max_abs_diff(g, c);
  }
}

TEST(ActivationCheckpoint, FullFineTuneGivesIdenticalLossAndGradientsFp32) {
  auto model = load_stories(torch::kFloat);
  model->train();
  for (auto& p : model->parameters()) p.requires_grad_(true);
  CheckpointRun plain = run(model, false);
  CheckpointRun checkpointed = run(model, true);
  EXPECT_EQ(plain.grads.size(), model->parameters().size());
  for (const auto& [name, g] : plain.grads) EXPECT_GT(g.abs().max().item<double>(), 0) << name;
  expect_identical(plain, checkpointed);
}

TEST(ActivationCheckpoint, FullFineTuneGivesIdenticalLossAndGradientsBf16) {
  auto model = load_stories(torch::kBFloat16);
  model->train();
  for (auto& p : model->parameters()) p.requires_grad_(true);
  CheckpointRun plain = run(model, false);
  CheckpointRun checkpointed = run(model, true);
  for (const auto& [name, g] : checkpointed.grads) EXPECT_EQ(g.scalar_type(), torch::kBFloat16) << name;
  expect_identical(plain, checkpointed);
}

// train.offload_activations on the CPU: the inputs are host memory already and stay where they
// are (the GPU path, copies and the prefetch on a side stream, is test_gpu's).
TEST(ActivationCheckpoint, OffloadOnTheCpuKeepsTheInputsAndChangesNothing) {
  auto model = load_stories(torch::kFloat);
  model->train();
  for (auto& p : model->parameters()) p.requires_grad_(true);
  CheckpointRun plain = run(model, false);
  expect_identical(plain, run(model, true, {/*enabled=*/true, /*prefetch=*/true}));
  expect_identical(plain, run(model, true, {/*enabled=*/true, /*prefetch=*/false}));
}

// A layer runner's offloaded inputs are per forward pass: the next micro-batch (the layer index
// starting over) gets its own, so a pass never takes back another pass's inputs.
TEST(ActivationCheckpoint, EachForwardPassOffloadsIntoItsOwnQueue) {
  OffloadSessions sessions(/*prefetch=*/true);
  const auto first = sessions.for_layer(0);
  EXPECT_EQ(sessions.for_layer(1), first);
  EXPECT_EQ(sessions.for_layer(4), first);
  const auto second = sessions.for_layer(0);
  EXPECT_NE(second, first);
  EXPECT_EQ(sessions.for_layer(1), second);
  EXPECT_NE(sessions.for_layer(1), second) << "a layer index that does not go up starts a new pass";
}

// LoRA: the base is frozen, so the first layer's input does not require grad; the gradients
// reach the adapters only because the layer's trainable parameters are inputs of the checkpoint.
LlamaForCausalLM lora_model(double dropout) {
  auto model = load_stories(torch::kFloat);
  LoraOptions o;
  o.r = 4;
  o.alpha = 8;
  o.dropout = dropout;
  o.targets = io::LoraTargets{{"all-linear"}, ""};
  apply_lora(model, o, 1);
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(5);
  for (auto& [name, p] : lora_parameters(model))  // B != 0, so that lora_A gets gradients too
    if (name.find("lora_B") != std::string::npos)
      p.copy_(at::normal(0.0, 0.05, p.sizes(), gen, torch::TensorOptions().dtype(torch::kFloat)));
  model->train();
  return model;
}

TEST(ActivationCheckpoint, LoraWithDropoutReplaysTheMasks) {
  auto model = lora_model(0.1);
  torch::manual_seed(7);
  CheckpointRun plain = run(model, false);
  const torch::Tensor plain_next = torch::rand({8});  // where the generator is after backward
  torch::manual_seed(7);
  CheckpointRun checkpointed = run(model, true);
  const torch::Tensor checkpointed_next = torch::rand({8});
  EXPECT_EQ(plain.grads.size(), 70u);
  expect_identical(plain, checkpointed);
  // Backward restores the generator: later draws (the next step's masks) are unchanged.
  EXPECT_TRUE(torch::equal(plain_next, checkpointed_next));
  // The control: other masks give other gradients, so equality above needed the replay.
  torch::manual_seed(8);
  CheckpointRun other = run(model, false);
  EXPECT_GT(test::max_abs_diff(other.grads.begin()->second, plain.grads.begin()->second), 1e-6);
}

// Runs a callback after a leaf's gradient has been accumulated (as parallel/grad_buckets does).
struct CountAccumulations : torch::autograd::FunctionPostHook {
  explicit CountAccumulations(int& count) : count(count) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    ++count;
    return outputs;
  }
  int& count;
};

TEST(ActivationCheckpoint, GradientsAccumulateIntoAFlatBufferAndHooksFire) {
  // The parameters and their .grad as views into flat buffers, as parallel/flat_parameters.h lays
  // them out; autograd must accumulate into those views (not replace them) and run the
  // accumulators' post hooks once per parameter per backward.
  auto model = load_stories(torch::kFloat);
  model->train();
  auto params = model->parameters();
  std::int64_t total = 0;
  for (auto& p : params) total += p.numel();
  auto values = torch::empty({total});
  auto grads = torch::zeros({total});
  std::vector<int> counts(params.size(), 0);
  std::vector<decltype(torch::autograd::impl::grad_accumulator(params[0]))> accumulators;  // shared_ptr (1.13) or intrusive_ptr (2.x)
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    auto& p = params[i];
    auto view = values.narrow(0, offset, p.numel()).view(p.sizes());
    view.copy_(p.detach());
    p.set_data(view);
    p.requires_grad_(true);
    p.mutable_grad() = grads.narrow(0, offset, p.numel()).view(p.sizes());
    offset += p.numel();
    auto accumulator = torch::autograd::impl::grad_accumulator(p);
    accumulator->add_post_hook(std::make_unique<CountAccumulations>(counts[i]));
    accumulators.push_back(accumulator);
  }
  auto buffer_of = [&] {
    std::vector<const void*> ptrs;
    for (auto& p : params) ptrs.push_back(p.grad().data_ptr());
    return ptrs;
  };
  const auto before = buffer_of();

  mean_loss(model, false).backward();
  const auto plain = grads.clone();
  EXPECT_GT(plain.abs().max().item<double>(), 0);
  for (int c : counts) EXPECT_EQ(c, 1);
  grads.zero_();
  mean_loss(model, true).backward();
  for (std::size_t i = 0; i < params.size(); ++i) EXPECT_EQ(counts[i], 2) << "parameter " << i;
  EXPECT_EQ(buffer_of(), before);  // every .grad is still its view
  EXPECT_TRUE(torch::equal(grads, plain)) << "max |diff| " << test::max_abs_diff(grads, plain);
  // A second backward without zeroing accumulates, as it does without checkpointing.
  mean_loss(model, true).backward();
  EXPECT_TRUE(torch::allclose(grads, 2 * plain, 1e-6, 1e-7));
}

TEST(ActivationCheckpoint, WithoutGradModeItIsThePlainForward) {
  for (double dropout : {0.0, 0.1}) {
    auto model = lora_model(dropout);
    model->eval();  // evaluation: no dropout, no grad
    torch::NoGradGuard no_grad;
    ForwardOptions plain, checkpointed;
    checkpointed.layer_runner = activation_checkpointing_runner();
    auto a = model(batch().ids, plain);
    auto b = model(batch().ids, checkpointed);
    EXPECT_FALSE(b.requires_grad());
    EXPECT_TRUE(torch::equal(a, b));
  }
}

TEST(ActivationCheckpoint, FiniteDifferenceAgreesWithTheRecomputedGradient) {
  // One RMSNorm weight inside layer 2 (64 elements): its gradient exists only through layer 2's
  // recomputation in backward. Central difference in fp32 with step 1e-2 on the element whose
  // gradient is largest: truncation error ~ step^2 * d3L ~ 1e-5, rounding ~ 1e-7 * L / step ~ 5e-5,
  // so 1% of the gradient (about 5e-4 here) is a loose but meaningful bound.
  auto model = load_stories(torch::kFloat);
  model->train();
  for (auto& p : model->parameters()) p.requires_grad_(false);
  torch::Tensor w = model->model->layers[2]->post_attention_layernorm->weight;
  w.requires_grad_(true);
  mean_loss(model, true).backward();
  const torch::Tensor g = w.grad().clone();
  const std::int64_t k = g.abs().argmax().item<std::int64_t>();
  const double analytic = g[k].item<double>();
  const double step = 1e-2;
  auto loss_at = [&](double delta) {
    torch::NoGradGuard no_grad;
    const float original = w[k].item<float>();
    w[k].fill_(original + delta);
    const double l = mean_loss(model, true).item<double>();
    w[k].fill_(original);
    return l;
  };
  const double numeric = (loss_at(step) - loss_at(-step)) / (2 * step);
  EXPECT_GT(std::abs(analytic), 1e-3);
  EXPECT_NEAR(numeric, analytic, 0.01 * std::abs(analytic)) << "element " << k;
}

}  // namespace
}  // namespace ft::model
