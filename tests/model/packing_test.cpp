// Packing changes nothing but speed: a packed batch (positions restarted, attention kept inside
// each sample) gives every sample the loss it has alone, on the real TinyStories model, with
// either attention kernel.
#include <gtest/gtest.h>

#include "data/batch.h"
#include "data/tokenized_dataset.h"
#include "data/tokenizer.h"
#include "model/causal_lm_loss.h"
#include "model/model_loader.h"
#include "test_support.h"

namespace ft {
namespace {

// Per-sample (sum of token losses, target count) from one batch, keyed by segment within row 0.
std::vector<std::pair<double, std::int64_t>> per_sample_losses(model::LlamaForCausalLM& m, const data::Batch& b) {
  torch::NoGradGuard g;
  model::ForwardOptions options;
  options.position_ids = b.position_ids;
  options.segment_ids = b.segment_ids;
  auto logits = m(b.input_ids, options)[0];
  auto labels = b.labels[0];
  auto segments = b.segment_ids[0];
  const auto t = logits.size(0);
  auto losses = torch::nn::functional::cross_entropy(
      logits.narrow(0, 0, t - 1), labels.narrow(0, 1, t - 1),
      torch::nn::functional::CrossEntropyFuncOptions().ignore_index(model::kIgnoreIndex).reduction(torch::kNone));
  std::vector<std::pair<double, std::int64_t>> out(segments.max().item<std::int64_t>() + 1);
  for (std::int64_t i = 0; i + 1 < t; ++i) {
    if (labels[i + 1].item<std::int64_t>() == model::kIgnoreIndex) continue;
    auto& slot = out[segments[i + 1].item<std::int64_t>()];
    slot.first += losses[i].item<double>();
    slot.second += 1;
  }
  return out;
}

TEST(Packing, PackedSamplesHaveTheirOwnLosses) {
  torch::set_num_threads(1);
  test::TempDir dir;
  data::Tokenizer tokenizer(test::data_path("stories260K"));
  config::DataConfig dc;
  dc.format = config::RecordFormat::kAlpaca;
  dc.max_seq_len = 96;  // samples of at most 96 tokens, packed into rows of 384
  dc.train_on_prompt = true;  // also checks that nothing is learned across a sample boundary
  auto settings = data::SampleSettings::from_config(dc);
  auto dataset = data::tokenize_dataset(test::data_path("datasets/alpaca_eval.jsonl"), settings, tokenizer, 1);
  data::write_token_file(dir.file("eval.ftok"), dataset, {1, 2, 3, static_cast<std::uint64_t>(tokenizer.vocab_size()), tokenizer.kind()});
  data::TokenFile file(dir.file("eval.ftok"));
  data::ItemView packed(file, 384, true), alone(file, 384, false);
  auto model = model::load_llama(test::data_path("stories260K"));
  std::vector<model::AttentionKernel> kernels{model::AttentionKernel::kEager};
  if (model::sdpa_available()) kernels.push_back(model::AttentionKernel::kSdpa);
  for (model::AttentionKernel kernel : kernels) {
    SCOPED_TRACE(model::attention_kernel_name(kernel));
    model->model->attention_kernel = kernel;
    int checked_packs = 0;
    for (std::size_t item = 0; item < packed.size() && checked_packs < 4; ++item) {
      if (packed.end_sample(item) - packed.first_sample(item) < 2) continue;
      ++checked_packs;
      auto in_pack = per_sample_losses(model, data::collate(packed, {static_cast<std::int64_t>(item)}));
      ASSERT_EQ(in_pack.size(), packed.end_sample(item) - packed.first_sample(item));
      for (std::size_t s = packed.first_sample(item); s < packed.end_sample(item); ++s) {
        auto own = per_sample_losses(model, data::collate(alone, {static_cast<std::int64_t>(s)}));
        ASSERT_EQ(own.size(), 1u);
        const auto& p = in_pack[s - packed.first_sample(item)];
        EXPECT_EQ(p.second, own[0].second) << "sample " << s;
        EXPECT_NEAR(p.first / p.second, own[0].first / own[0].second, 1e-5) << "sample " << s;
      }
    }
    EXPECT_GE(checked_packs, 2) << "the data should contain packs of several samples";
  }
}

}  // namespace
}  // namespace ft
