// Token files: round trip, refusal of foreign, stale or damaged files, and the rank-0-builds /
// others-wait protocol; collation with and without packing.
#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include "data/batch.h"
#include "data/prepared_data.h"
#include "data/token_file.h"
#include "data/tokenizer.h"
#include "test_support.h"
#include "util/file_util.h"

namespace ft::data {
namespace {

TokenizedDataset small_dataset() {
  TokenizedDataset d;
  d.tokens = {1, 5, 6, 7, 2, 1, 8, 2, 1, 9, 10, 11, 12, 2};
  d.targets = {0, 0, 1, 1, 1, 0, 1, 1, 0, 0, 0, 1, 1, 1};
  d.offsets = {0, 5, 8, 14};
  d.stats.samples = 3;
  d.stats.tokens = 14;
  d.stats.records = 4;
  d.stats.dropped_no_target = 1;
  return d;
}

TEST(TokenFile, RoundTrip) {
  test::TempDir dir;
  TokenFileIdentity id{11, 22, 33, 100};
  write_token_file(dir.file("t.ftok"), small_dataset(), id);
  TokenFile f(dir.file("t.ftok"));
  EXPECT_EQ(f.num_samples(), 3u);
  EXPECT_EQ(f.num_tokens(), 14u);
  EXPECT_EQ(f.sample_length(2), 6u);
  EXPECT_EQ(f.sample_tokens(1)[1], 8);
  EXPECT_EQ(f.sample_targets(2)[3], 1);
  EXPECT_EQ(f.stats().dropped_no_target, 1);
  EXPECT_EQ(token_file_mismatch(f, id), "");
  EXPECT_NE(token_file_mismatch(f, {12, 22, 33, 100}).find("was made with another tokenizer than the model's; run ft_prep"),
            std::string::npos);
  // The kind of tokenizer is recorded, and named when it changed.
  write_token_file(dir.file("bpe.ftok"), small_dataset(), {11, 22, 33, 100, "bpe"});
  TokenFile bpe(dir.file("bpe.ftok"));
  EXPECT_EQ(bpe.identity().tokenizer_kind, "bpe");
  EXPECT_NE(token_file_mismatch(bpe, {12, 22, 33, 100, "sentencepiece"})
                .find("was made with another tokenizer (tokenizer.json) than the model's (tokenizer.model)"),
            std::string::npos);
  EXPECT_NE(token_file_mismatch(f, {11, 23, 33, 100}).find("from a different version of the dataset"), std::string::npos);
  EXPECT_NE(token_file_mismatch(f, {11, 22, 34, 100}).find("with other data settings"), std::string::npos);
}

TEST(TokenFile, DamagedFilesAreErrors) {
  test::TempDir dir;
  const std::string path = dir.file("t.ftok");
  write_token_file(path, small_dataset(), {1, 2, 3, 100});
  const std::string good = read_file(path);
  auto write = [&](const std::string& bytes) { std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes; };
  write(good.substr(0, good.size() - 1));
  EXPECT_FT_ERROR(TokenFile f(path), "truncated or damaged: the header describes 3 samples and 14 tokens");
  write(good.substr(0, 50));
  EXPECT_FT_ERROR(TokenFile f(path), "not an ft token file");
  write("{\"a\": 1}");
  EXPECT_FT_ERROR(TokenFile f(path), "re-run ft_prep");
  std::string bad_id = good;
  const std::size_t tokens_at = 128 + 4 * 8;
  bad_id[tokens_at + 4] = 101;  // second token id -> 101 >= vocab 100
  write(bad_id);
  EXPECT_FT_ERROR(TokenFile f(path), "token id 101 at position 1 is outside the vocabulary of 100");
  std::string bad_offset = good;
  bad_offset[128 + 8] = 9;  // offsets[1] = 9 > offsets[2] = 8
  write(bad_offset);
  EXPECT_FT_ERROR(TokenFile f(path), "damaged sample offsets at sample 1");
}

config::RunConfig tiny_config(const std::string& run_dir) {
  Json j = {{"run_dir", run_dir},
            {"model", {{"path", test::data_path("stories260K")}}},
            {"data", {{"train", test::data_path("datasets/alpaca_eval.jsonl")}, {"max_seq_len", 128}}},
            {"train", {{"global_batch_size", 4}, {"lr", 1e-3}}}};
  return config::parse_run_config(j, "tiny");
}

TEST(PreparedData, BuilderWritesOthersWaitStaleIsRefused) {
  test::TempDir dir;
  config::RunConfig c = tiny_config(dir.path());
  Tokenizer tokenizer(test::data_path("stories260K"));
  std::shared_ptr<TokenFile> waited;
  std::thread follower([&] { waited = open_token_file(c, Split::kTrain, tokenizer, false, 60); });
  auto built = open_token_file(c, Split::kTrain, tokenizer, true, 60);
  follower.join();
  ASSERT_TRUE(waited && built);
  EXPECT_EQ(waited->num_tokens(), built->num_tokens());
  EXPECT_EQ(built->stats().records, 100);
  // Changed settings: refused with the hint to re-run ft_prep.
  c.data.max_seq_len = 64;
  EXPECT_FT_ERROR(open_token_file(c, Split::kTrain, tokenizer, true, 60), "with other data settings");
  // A follower gives up after the timeout when nobody builds.
  config::RunConfig other = tiny_config(dir.file("other"));
  EXPECT_FT_ERROR(open_token_file(other, Split::kTrain, tokenizer, false, 0.3), "for rank 0 to write");
}

TEST(Batch, PaddedBatch) {
  test::TempDir dir;
  write_token_file(dir.file("t.ftok"), small_dataset(), {1, 2, 3, 100});
  TokenFile f(dir.file("t.ftok"));
  ItemView view(f, 16, false);
  ASSERT_EQ(view.size(), 3u);
  Batch b = collate(view, {2, 0});
  EXPECT_EQ(b.input_ids.sizes(), torch::IntArrayRef({2, 6}));
  EXPECT_TRUE(torch::equal(b.input_ids[1], torch::tensor({1, 5, 6, 7, 2, 0})));
  EXPECT_TRUE(torch::equal(b.labels[1], torch::tensor({-100, -100, 6, 7, 2, -100})));
  EXPECT_TRUE(torch::equal(b.segment_ids[1], torch::tensor({0, 0, 0, 0, 0, -1})));
  EXPECT_EQ(b.num_tokens, 11);
  EXPECT_EQ(b.num_padding, 1);
  EXPECT_EQ(b.num_target_tokens, 3 + 3);
}

TEST(Batch, PackedItemsRestartPositions) {
  test::TempDir dir;
  write_token_file(dir.file("t.ftok"), small_dataset(), {1, 2, 3, 100});
  TokenFile f(dir.file("t.ftok"));
  ItemView view(f, 8, true);  // [5 + 3] fits 8, the 6-token sample is alone
  ASSERT_EQ(view.size(), 2u);
  Batch b = collate(view, {0, 1});
  EXPECT_TRUE(torch::equal(b.position_ids[0], torch::tensor({0, 1, 2, 3, 4, 0, 1, 2})));
  EXPECT_TRUE(torch::equal(b.segment_ids[0], torch::tensor({0, 0, 0, 0, 0, 1, 1, 1})));
  // The first token of the second sample never has a label (nothing in its sample predicts it).
  EXPECT_TRUE(torch::equal(b.labels[0], torch::tensor({-100, -100, 6, 7, 2, -100, 8, 2})));
  EXPECT_EQ(b.num_samples, 3);
  EXPECT_EQ(b.num_padding, 2);
}

}  // namespace
}  // namespace ft::data
