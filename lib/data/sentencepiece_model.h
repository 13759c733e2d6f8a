// Reads a sentencepiece ModelProto (tokenizer.model) from its protobuf wire format by hand, so
// that ft never links libsentencepiece or a second protobuf. Only the fields that change encoding
// or decoding are kept; every other field (training options, extensions) is skipped by wire type.
// Field numbers follow google/sentencepiece src/sentencepiece_model.proto (0.1.97).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ft::data {

// ModelProto.SentencePiece.Type.
enum class PieceType : std::uint8_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// TrainerSpec.ModelType.
enum class ModelType : std::int32_t { kUnigram = 1, kBpe = 2, kWord = 3, kChar = 4 };

const char* model_type_name(std::int32_t type);  // "unigram", "bpe", ... or "unknown"

struct SentencePiece {
  std::string piece;  // never empty in a valid model
  float score = 0.0f;
  PieceType type = PieceType::kNormal;
};

// Defaults are the .proto's defaults, used when a field is absent.
struct SentencePieceModel {
  std::vector<SentencePiece> pieces;  // the id of a piece is its index

  // trainer_spec
  std::int32_t model_type = static_cast<std::int32_t>(ModelType::kUnigram);
  bool byte_fallback = false;
  bool treat_whitespace_as_suffix = false;
  std::int32_t unk_id = 0, bos_id = 1, eos_id = 2, pad_id = -1;  // as recorded at training
  std::string unk_piece = "<unk>", bos_piece = "<s>", eos_piece = "</s>", pad_piece = "<pad>";
  std::string unk_surface = " \xE2\x81\x87 ";  // what decode prints for an unknown piece

  // normalizer_spec
  std::string normalizer_name;
  std::string precompiled_charsmap;  // non-empty: a Unicode normalization ft does not implement
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;

  // denormalizer_spec (applied by sentencepiece after decoding when its charsmap is non-empty)
  std::string denormalizer_charsmap;

  // self_test_data (field 4) is skipped: sentencepiece checks it at load, ft's reference tests
  // check far more strings against the real sentencepiece.
};

// Parses serialized ModelProto bytes. `source` (the file name) starts every error message.
// Throws ft::Error on truncated or malformed input; never reads outside `bytes`.
SentencePieceModel parse_sentencepiece_model(std::string_view bytes, const std::string& source);

}  // namespace ft::data
