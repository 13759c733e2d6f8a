// io/safetensors: bit-exact round trips for every dtype, the real TinyStories file, and a
// validating parser that turns every malformed header into an ft::Error naming the file.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>

#include "io/safetensors.h"
#include "test_support.h"
#include "util/file_util.h"

namespace ft::io {
namespace {

// Writes an 8-byte length, `header` and `data` as-is: for building broken files.
void write_raw(const std::string& path, const std::string& header, const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  std::uint64_t len = header.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out << header << data;
}

bool bitwise_equal(const torch::Tensor& a, const torch::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() &&
         (a.nbytes() == 0 ||  // an empty tensor's data pointer may be null, which memcmp must not get
          std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.nbytes()) == 0);
}

TEST(Safetensors, RoundTripIsBitExactForEveryDtype) {
  test::TempDir dir;
  // Random bit patterns (NaN payloads, subnormals, -0) reinterpreted as each dtype.
  auto bits = [](std::int64_t bytes) {
    return torch::randint(0, 256, {bytes}, torch::kLong).to(torch::kByte);
  };
  NamedTensors tensors;
  for (auto type : {torch::kFloat, torch::kHalf, torch::kBFloat16, torch::kDouble, torch::kLong, torch::kInt,
                    torch::kShort, torch::kChar, torch::kByte}) {
    const int size = static_cast<int>(c10::elementSize(type));
    tensors.emplace_back(std::string("t_") + c10::toString(type), bits(size * 35).view(type).reshape({5, 7}));
  }
  tensors.emplace_back("bool", torch::randint(0, 2, {3, 3}).to(torch::kBool));
  tensors.emplace_back("scalar", torch::tensor(3.5f).reshape({}));
  tensors.emplace_back("empty", torch::empty({0, 4}));
  tensors.emplace_back("noncontiguous", torch::arange(12, torch::kFloat).reshape({3, 4}).t());
  write_safetensors(dir.file("all.safetensors"), tensors, {{"note", "hi"}});

  SafetensorsReader reader(dir.file("all.safetensors"));
  EXPECT_EQ(reader.metadata().at("format"), "pt");
  EXPECT_EQ(reader.metadata().at("note"), "hi");
  ASSERT_EQ(reader.tensors().size(), tensors.size());
  for (const auto& [name, tensor] : tensors) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(bitwise_equal(reader.load(name), tensor.contiguous()));
  }
  // The data starts 8-byte aligned.
  std::string raw = read_file(dir.file("all.safetensors"));
  std::uint64_t header_len;
  std::memcpy(&header_len, raw.data(), 8);
  EXPECT_EQ((8 + header_len) % 8, 0u);
  EXPECT_EQ(raw[8], '{');
}

TEST(Safetensors, ReadsTheTinyStoriesModel) {
  SafetensorsReader reader(test::data_path("stories260K/model.safetensors"));
  EXPECT_EQ(reader.tensors().size(), 48u);
  EXPECT_EQ(reader.metadata().at("format"), "pt");
  const TensorInfo& k = reader.info("model.layers.0.self_attn.k_proj.weight");
  EXPECT_EQ(k.shape, (std::vector<std::int64_t>{32, 64}));
  EXPECT_STREQ(k.dtype->name, "F32");
  // lm_head is stored and bit-identical to the (tied) embedding.
  EXPECT_TRUE(bitwise_equal(reader.load("lm_head.weight"), reader.load("model.embed_tokens.weight")));
  EXPECT_FT_ERROR(reader.info("model.layers.9.mlp.up_proj.weight"),
                  "model.safetensors: no tensor named 'model.layers.9.mlp.up_proj.weight'");
}

TEST(Safetensors, WriterRefusesDuplicateNames) {
  test::TempDir dir;
  EXPECT_FT_ERROR(write_safetensors(dir.file("d.safetensors"), {{"a", torch::zeros({1})}, {"a", torch::zeros({1})}}),
                  "tensor 'a' given twice");
}

struct BadFile {
  const char* what;
  std::string header;
  std::string data;
  const char* message;
};

TEST(Safetensors, MalformedFilesAreErrorsNamingFileAndTensor) {
  const std::string f32x2(8, '\0');
  const std::vector<BadFile> cases = {
      {"offsets overlap", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       std::string(12, '\0'), "tensor 'b' data_offsets [4, 12] overlap the previous tensor"},
      {"hole", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
       std::string(12, '\0'), "tensor 'b' data_offsets [8, 12] leave a hole"},
      {"shape disagrees with offsets", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", f32x2,
       "tensor 'a': shape [3] of F32 needs 12 bytes but data_offsets [0, 8] span 8"},
      {"unknown dtype", R"({"a":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", f32x2,
       "tensor 'a': unknown dtype \"F33\" (expected one of BOOL, U8"},
      {"truncated data", R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", f32x2,
       "truncated: tensors need 16 bytes of data but the file holds 8"},
      {"trailing bytes", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", f32x2,
       "4 bytes after the last tensor belong to no tensor"},
      {"end before begin", R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", f32x2,
       "tensor 'a': data_offsets [8, 0] end before they begin"},
      {"negative dim", R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", f32x2,
       "tensor 'a' shape: expected a non-negative integer, got -2"},
      {"huge shape", R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})", f32x2,
       "has too many elements"},
      {"missing field", R"({"a":{"dtype":"F32","shape":[2]}})", f32x2, "tensor 'a': missing \"data_offsets\""},
      {"not an object", R"({"a":[1,2]})", "", "tensor 'a': expected an object"},
      {"bad metadata", R"({"__metadata__":{"format":1}})", "", "__metadata__ \"format\" must be a string"},
      {"invalid json", R"({"a":{"dtype":"F32",)", "", "header: invalid JSON at line 1"},
      {"not json object", R"([1,2,3])", "", "not a safetensors file (the header does not start with '{')"},
      {"deep nesting", "{\"a\":[[[[[[1]]]]]]}", "", "JSON nested more than 4 levels deep"},
      {"unexpected field", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", f32x2,
       "tensor 'a': unexpected field \"x\""},
  };
  test::TempDir dir;
  for (const BadFile& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string path = dir.file("bad.safetensors");
    write_raw(path, c.header, c.data);
    EXPECT_FT_ERROR(SafetensorsReader reader(path), c.message);
    EXPECT_FT_ERROR(SafetensorsReader reader(path), path);
  }
}

TEST(Safetensors, HeaderLengthBeyondTheFile) {
  test::TempDir dir;
  const std::string path = dir.file("short.safetensors");
  std::ofstream(path, std::ios::binary) << "abc";
  EXPECT_FT_ERROR(SafetensorsReader reader(path), "shorter than the 8-byte header length");
  std::string bytes(8, '\0');
  std::uint64_t len = 1000;
  std::memcpy(bytes.data(), &len, 8);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes << "{}";
  EXPECT_FT_ERROR(SafetensorsReader reader(path), "truncated: the header claims 1000 bytes but only 2 follow");
  len = 1ull << 40;
  std::memcpy(bytes.data(), &len, 8);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes << "{}";
  EXPECT_FT_ERROR(SafetensorsReader reader(path), "exceeds the 104857600-byte limit");
  EXPECT_FT_ERROR(SafetensorsReader reader(dir.file("missing.safetensors")), "missing.safetensors: cannot open");
}

TEST(Safetensors, EveryTruncationOfARealFileIsAnError) {
  const std::string full = read_file(test::data_path("stories260K/model.safetensors"));
  // Cut inside the length, the header, and the data.
  for (std::size_t cut : {0ul, 5ul, 9ul, 100ul, 4943ul, 4944ul, 4945ul, 10000ul, full.size() - 1}) {
    SCOPED_TRACE(cut);
    EXPECT_THROW(parse_safetensors_header(reinterpret_cast<const std::uint8_t*>(full.data()), cut, "cut"), Error);
  }
}

TEST(Safetensors, RandomHeaderMutationsNeverCrash) {
  // A small in-test fuzz (the libFuzzer target in fuzz/ goes further): flip bytes of a valid
  // header; every outcome must be a clean parse or an ft::Error.
  test::TempDir dir;
  write_safetensors(dir.file("ok.safetensors"),
                    {{"a", torch::ones({2, 3})}, {"b", torch::zeros({4}, torch::kBFloat16)}});
  const std::string original = read_file(dir.file("ok.safetensors"));
  std::mt19937 rng(42);
  int parsed = 0, rejected = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string bytes = original;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) bytes[rng() % std::min<std::size_t>(bytes.size(), 160)] = static_cast<char>(rng());
    try {
      auto header = parse_safetensors_header(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size(), "m");
      for (const auto& t : header.tensors) ASSERT_LE(header.data_start + t.end, bytes.size());
      ++parsed;
    } catch (const Error&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);
  EXPECT_EQ(parsed + rejected, 3000);
}

}  // namespace
}  // namespace ft::io

namespace ft::io {
namespace {

TEST(SafetensorsStream, SameBytesAsTheWholeFileWriter) {
  test::TempDir dir;
  NamedTensors tensors = {{"a", torch::arange(6, torch::kFloat).reshape({2, 3})},
                          {"b", torch::ones({4}, torch::kBFloat16)},
                          {"s", torch::tensor(2.0).reshape({})}};
  write_safetensors(dir.file("whole.safetensors"), tensors);
  std::vector<SafetensorsStreamWriter::Entry> entries;
  for (auto& [name, t] : tensors) entries.push_back({name, t.scalar_type(), t.sizes().vec()});
  {
    SafetensorsStreamWriter w(dir.file("stream.safetensors"), entries);
    for (auto& [name, t] : tensors) w.write(name, t.to(torch::kDouble));  // converted to the declared dtype
    w.finish();
  }
  EXPECT_EQ(read_file(dir.file("stream.safetensors")), read_file(dir.file("whole.safetensors")));
  {
    SafetensorsStreamWriter w(dir.file("abandoned.safetensors"), entries);
    w.write("a", tensors[0].second);
  }
  EXPECT_FALSE(file_exists(dir.file("abandoned.safetensors")));
  SafetensorsStreamWriter w(dir.file("x.safetensors"), entries);
  EXPECT_FT_ERROR(w.write("a", torch::zeros({3, 2})), "tensor 'a' has shape [3, 2], declared [2, 3]");
}

}  // namespace
}  // namespace ft::io
