// io/weight_source: one file or shards through model.safetensors.index.json.
#include <gtest/gtest.h>

#include "io/weight_source.h"
#include "test_support.h"
#include "util/file_util.h"

namespace ft::io {
namespace {

void write_index(const std::string& dir, const std::string& weight_map) {
  write_file_atomic(dir + "/model.safetensors.index.json",
                    R"({"metadata": {"total_size": 40}, "weight_map": )" + weight_map + "}");
}

TEST(WeightSource, SingleFileFolder) {
  WeightSource source(test::data_path("stories260K"));
  EXPECT_EQ(source.names().size(), 48u);
  EXPECT_EQ(source.total_bytes(), 1171200u);
  EXPECT_EQ(source.load("model.norm.weight").sizes(), torch::IntArrayRef({64}));
}

TEST(WeightSource, ShardedFolder) {
  test::TempDir dir;
  write_safetensors(dir.file("model-00001-of-00002.safetensors"), {{"a", torch::arange(4, torch::kFloat)}});
  write_safetensors(dir.file("model-00002-of-00002.safetensors"),
                    {{"b", torch::ones({2, 3})}, {"c", torch::zeros({0})}});
  write_index(dir.path(), R"({"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors",
                             "c": "model-00002-of-00002.safetensors"})");
  WeightSource source(dir.path());
  EXPECT_EQ(source.names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(torch::equal(source.load("a"), torch::arange(4, torch::kFloat)));
  EXPECT_TRUE(torch::equal(source.load("b"), torch::ones({2, 3})));
  EXPECT_EQ(source.file_of("b"), dir.file("model-00002-of-00002.safetensors"));
}

TEST(WeightSource, IndexErrors) {
  test::TempDir dir;
  write_safetensors(dir.file("s1.safetensors"), {{"a", torch::zeros({1})}});
  write_index(dir.path(), R"({"b": "s1.safetensors"})");
  EXPECT_FT_ERROR(WeightSource s(dir.path()), "tensor 'b' is mapped to s1.safetensors, which does not contain it");
  write_index(dir.path(), R"({"a": "missing.safetensors"})");
  EXPECT_FT_ERROR(WeightSource s(dir.path()), "missing.safetensors: cannot open");
  write_index(dir.path(), R"({"a": "../s1.safetensors"})");
  EXPECT_FT_ERROR(WeightSource s(dir.path()), "is not a file name in the model folder");
  write_index(dir.path(), R"({"a": 3})");
  EXPECT_FT_ERROR(WeightSource s(dir.path()), "weight_map[\"a\"]: expected a file name, got 3");
}

TEST(WeightSource, FolderWithoutWeights) {
  test::TempDir dir;
  EXPECT_FT_ERROR(WeightSource s(dir.path()), "no model.safetensors or model.safetensors.index.json");
}

}  // namespace
}  // namespace ft::io
