// Generation: the KV cache gives the same tokens as recomputing the whole sequence each step
// (also with a sliding window, which the cache path applies through its mask), sampling is
// seeded, and the top-k / top-p filters behave as HF's warpers.
#include <gtest/gtest.h>

#include "model/attention.h"
#include "model/generation.h"
#include "model/kv_cache.h"
#include "model/model_loader.h"
#include "model/sampler.h"
#include "test_support.h"

namespace ft::model {
namespace {

LlamaForCausalLM& stories() {
  static LlamaForCausalLM model = load_llama(test::data_path("stories260K"));
  return model;
}

TEST(Generation, KvCacheEqualsFullRecomputation) {
  torch::set_num_threads(1);
  for (double temperature : {0.0, 0.9}) {
    SCOPED_TRACE(temperature);
    GenerationOptions options;
    options.max_new_tokens = 60;
    options.sampling.temperature = temperature;
    options.sampling.top_k = temperature > 0 ? 40 : 0;
    options.seed = 11;
    std::vector<std::int64_t> prompt = {1, 403, 407, 261, 378};
    auto cached = generate(stories(), prompt, options);
    options.use_cache = false;
    auto recomputed = generate(stories(), prompt, options);
    EXPECT_EQ(cached, recomputed);
    EXPECT_EQ(cached.size(), 60u);
  }
}

// stories260K's weights as a mistral model with a window of 6: position p sees (p - 6, p].
LlamaForCausalLM windowed(std::int64_t window) {
  io::LlamaConfig config = stories()->config();
  config.model_type = io::ModelType::kMistral;
  config.sliding_window = window;
  config.sliding_layers.assign(static_cast<std::size_t>(config.num_hidden_layers), true);
  LlamaForCausalLM model(config, torch::TensorOptions().dtype(torch::kFloat));
  torch::NoGradGuard no_grad;
  auto source = stories()->named_parameters();
  for (auto& p : model->named_parameters()) p.value().copy_(source[p.key()]);
  model->eval();
  return model;
}

TEST(Generation, SlidingWindowWithAndWithoutTheKvCache) {
  torch::set_num_threads(1);
  torch::NoGradGuard no_grad;
  auto ids = torch::tensor({1, 403, 407, 261, 378, 12, 99, 41, 305, 17, 230, 8, 77, 401, 2, 3, 55, 190, 66, 7})
                 .unsqueeze(0);
  const std::int64_t t = ids.size(1), window = 6;
  auto model = windowed(window);
  std::vector<AttentionKernel> kernels{AttentionKernel::kEager};
  if (sdpa_available()) kernels.push_back(AttentionKernel::kSdpa);
  for (AttentionKernel kernel : kernels) {
    SCOPED_TRACE(attention_kernel_name(kernel));
    model->model->attention_kernel = kernel;
    stories()->model->attention_kernel = kernel;
    auto full = model(ids);
    auto plain = stories()(ids);
    // Up to the window every query sees all its keys: the plain model's logits; after it, not.
    EXPECT_LT(test::max_abs_diff(full.narrow(1, 0, window), plain.narrow(1, 0, window)), 1e-5);
    EXPECT_GT(test::max_abs_diff(full.narrow(1, window, t - window), plain.narrow(1, window, t - window)), 1e-2);
    // With the cache: a 5-token prompt, then one token at a time, then a chunk of 4.
    KvCache cache(model->config(), 1, t, torch::TensorOptions().dtype(torch::kFloat));
    ForwardOptions options;
    options.cache = &cache;
    std::vector<torch::Tensor> pieces;
    std::int64_t at = 0;
    for (std::int64_t n : {5, 1, 1, 1, 1, 1, 1, 4, 1, 1, 1, 1, 1}) {
      pieces.push_back(model(ids.narrow(1, at, n), options));
      at += n;
    }
    ASSERT_EQ(at, t);
    EXPECT_LT(test::max_abs_diff(torch::cat(pieces, 1), full), 1e-4);  // logits up to ~20: fp32 rounding
  }
  stories()->model->attention_kernel = parse_attention_kernel("auto", "test");
}

TEST(Generation, SeededSamplingIsReproducible) {
  GenerationOptions options;
  options.max_new_tokens = 30;
  options.sampling.temperature = 1.0;
  options.seed = 5;
  auto a = generate(stories(), {1}, options);
  auto b = generate(stories(), {1}, options);
  options.seed = 6;
  auto c = generate(stories(), {1}, options);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(Generation, StopsAtAStopId) {
  GenerationOptions options;
  options.max_new_tokens = 50;
  options.sampling.temperature = 0;
  auto free_run = generate(stories(), {1, 403, 407, 261, 378}, options);
  options.stop_ids = {free_run[3]};
  auto stopped = generate(stories(), {1, 403, 407, 261, 378}, options);
  ASSERT_EQ(stopped.size(), 4u);
  EXPECT_EQ(stopped.back(), free_run[3]);
}

TEST(Generation, RejectsBadInput) {
  GenerationOptions options;
  EXPECT_FT_ERROR(generate(stories(), {}, options), "at least one prompt token");
  EXPECT_FT_ERROR(generate(stories(), {1, 512}, options), "prompt token id 512 at position 1 is outside the model's vocabulary [0, 512)");
  options.sampling.top_p = 0;
  EXPECT_FT_ERROR(generate(stories(), {1}, options), "--top-p: expected a number in (0, 1], got 0");
  options.sampling.top_p = 1;
  options.sampling.temperature = -1;
  EXPECT_FT_ERROR(generate(stories(), {1}, options), "--temperature: expected a number >= 0");
}

TEST(Sampler, Filters) {
  auto logits = torch::tensor({1.0f, 3.0f, 2.0f, 0.0f});
  SamplingOptions o;
  o.top_k = 2;
  auto kept = filter_logits(logits, o).isfinite();
  EXPECT_TRUE(torch::equal(kept, torch::tensor({false, true, true, false})));
  // softmax([1,3,2,0]) = [0.087, 0.644, 0.237, 0.032]: top_p 0.7 keeps the two most likely.
  o.top_k = 0;
  o.top_p = 0.7;
  kept = filter_logits(logits, o).isfinite();
  EXPECT_TRUE(torch::equal(kept, torch::tensor({false, true, true, false})));
  o.top_p = 0.5;
  kept = filter_logits(logits, o).isfinite();
  EXPECT_TRUE(torch::equal(kept, torch::tensor({false, true, false, false})));
  // top_k 1 is greedy whatever the seed.
  o = SamplingOptions();
  o.top_k = 1;
  auto gen = at::detail::createCPUGenerator(3);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(sample_next_token(logits, o, gen), 1);
  o.temperature = 0;
  EXPECT_EQ(sample_next_token(logits, o, gen), 1);
}

}  // namespace
}  // namespace ft::model
