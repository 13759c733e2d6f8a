// Protobuf wire-format reader for sentencepiece's ModelProto: varints, length-delimited fields,
// fixed32/fixed64 and (deprecated) groups. Repeated occurrences of a sub-message merge as in
// protobuf; unknown fields are skipped; a field with the wrong wire type or running past its
// enclosing message is an error that names the file, the field and the byte offset.
#include "data/sentencepiece_model.h"

#include <cstring>

#include "util/error.h"

namespace ft::data {
namespace {

enum WireType : std::uint32_t {
  kVarint = 0,
  kFixed64 = 1,
  kLengthDelimited = 2,
  kStartGroup = 3,
  kEndGroup = 4,
  kFixed32 = 5,
};

const char* wire_type_name(std::uint32_t type) {
  switch (type) {
    case kVarint: return "varint";
    case kFixed64: return "fixed64";
    case kLengthDelimited: return "length-delimited";
    case kStartGroup: return "start-group";
    case kEndGroup: return "end-group";
    case kFixed32: return "fixed32";
  }
  return "invalid";
}

constexpr int kMaxGroupDepth = 64;

// A cursor over one message's bytes [pos, end) of the whole file `data`.
class Reader {
 public:
  Reader(std::string_view data, std::size_t begin, std::size_t end, const std::string& source,
         const char* message)
      : data_(data), pos_(begin), end_(end), source_(source), message_(message) {}

  bool done() const { return pos_ >= end_; }

  // Reads a tag; returns false at the end of the message.
  bool next_field(std::uint32_t* field, std::uint32_t* wire) {
    if (done()) return false;
    tag_offset_ = pos_;
    const std::uint64_t tag = varint("a field tag");
    *field = static_cast<std::uint32_t>(tag >> 3);
    *wire = static_cast<std::uint32_t>(tag & 7);
    FT_CHECK(tag >> 3 <= 0x1fffffff && *field != 0, source_, ": malformed sentencepiece model: ",
             message_, " has a field tag with field number ", (tag >> 3), " at byte ", tag_offset_,
             " (hint: the file may be corrupt or not a tokenizer.model)");
    FT_CHECK(*wire <= kFixed32 && *wire != 6 && *wire != 7, source_,
             ": malformed sentencepiece model: ", message_, " field ", *field,
             " has invalid wire type ", *wire, " at byte ", tag_offset_,
             " (hint: the file may be corrupt or not a tokenizer.model)");
    field_ = *field;
    wire_ = *wire;
    return true;
  }

  std::uint64_t varint(const char* what) {
    std::uint64_t value = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      FT_CHECK(pos_ < end_, source_, ": truncated sentencepiece model: ", message_,
               " ends inside ", what, " at byte ", pos_, " (hint: the file is incomplete)");
      const auto byte = static_cast<std::uint8_t>(data_[pos_++]);
      FT_CHECK(shift < 63 || byte <= 1, source_, ": malformed sentencepiece model: ", message_,
               " has a varint longer than 64 bits in ", what, " at byte ", pos_ - 1);
      value |= static_cast<std::uint64_t>(byte & 0x7f) << shift;
      if (!(byte & 0x80)) return value;
    }
    FT_ASSERT(false, "varint loop ended without returning");
    return 0;
  }

  // The current field's payload, checked against its wire type.
  std::uint64_t read_varint_field(const char* name) {
    expect_wire(kVarint, name);
    return varint(name);
  }
  std::int32_t read_int32(const char* name) {
    return static_cast<std::int32_t>(static_cast<std::uint32_t>(read_varint_field(name)));
  }
  bool read_bool(const char* name) { return read_varint_field(name) != 0; }
  float read_float(const char* name) {
    expect_wire(kFixed32, name);
    const std::string_view bytes = take(4, name);
    std::uint32_t bits = 0;
    for (int i = 3; i >= 0; --i) bits = (bits << 8) | static_cast<std::uint8_t>(bytes[i]);
    float value;
    std::memcpy(&value, &bits, sizeof(value));
    return value;
  }
  std::string_view read_bytes(const char* name) {
    expect_wire(kLengthDelimited, name);
    const std::uint64_t size = varint(name);
    return take(size, name);
  }
  // A sub-message's extent, as a Reader over the same data.
  Reader read_message(const char* name) {
    expect_wire(kLengthDelimited, name);
    const std::uint64_t size = varint(name);
    check_room(size, name);
    Reader sub(data_, pos_, pos_ + size, source_, name);
    pos_ += size;
    return sub;
  }

  void skip_field() {
    // Groups nest: remember the field number of every open group so that an end-group tag must
    // match the innermost one (protobuf's rule), without recursion.
    std::uint32_t open[kMaxGroupDepth];
    int depth = 0;
    std::uint32_t field = field_, wire = wire_;
    for (;;) {
      switch (wire) {
        case kVarint: varint("a skipped field"); break;
        case kFixed64: take(8, "a skipped fixed64 field"); break;
        case kFixed32: take(4, "a skipped fixed32 field"); break;
        case kLengthDelimited: take(varint("a skipped field"), "a skipped field"); break;
        case kStartGroup:
          FT_CHECK(depth < kMaxGroupDepth, source_, ": malformed sentencepiece model: ", message_,
                   " has groups nested deeper than ", kMaxGroupDepth, " at byte ", tag_offset_);
          open[depth++] = field;
          break;
        case kEndGroup:
          FT_CHECK(depth > 0 && open[depth - 1] == field, source_,
                   ": malformed sentencepiece model: ", message_, " has an end-group tag for field ",
                   field, " at byte ", tag_offset_, " that closes no open group");
          --depth;
          break;
      }
      if (depth == 0) return;
      FT_CHECK(!done(), source_, ": truncated sentencepiece model: ", message_,
               " ends inside group ", open[depth - 1], " (hint: the file is incomplete)");
      next_field(&field, &wire);
    }
  }

 private:
  void expect_wire(std::uint32_t wire, const char* name) {
    FT_CHECK(wire_ == wire, source_, ": malformed sentencepiece model: ", message_, " field ",
             field_, " (", name, ") should be ", wire_type_name(wire), " but is ",
             wire_type_name(wire_), " at byte ", tag_offset_,
             " (hint: the file may be corrupt or not a tokenizer.model)");
  }
  void check_room(std::uint64_t size, const char* what) {
    FT_CHECK(size <= end_ - pos_, source_, ": truncated sentencepiece model: ", what, " at byte ",
             pos_, " needs ", size, " bytes but only ", end_ - pos_, " remain in ", message_,
             " (hint: the file is incomplete or corrupt)");
  }
  std::string_view take(std::uint64_t size, const char* what) {
    check_room(size, what);
    std::string_view out = data_.substr(pos_, size);
    pos_ += size;
    return out;
  }

  std::string_view data_;
  std::size_t pos_, end_;
  const std::string& source_;
  const char* message_;
  std::size_t tag_offset_ = 0;
  std::uint32_t field_ = 0, wire_ = 0;
};

void parse_piece(Reader r, std::size_t index, const std::string& source, SentencePiece* piece) {
  std::uint32_t field, wire;
  while (r.next_field(&field, &wire)) {
    switch (field) {
      case 1: piece->piece = std::string(r.read_bytes("SentencePiece.piece")); break;
      case 2: piece->score = r.read_float("SentencePiece.score"); break;
      case 3: {
        const std::int32_t type = r.read_int32("SentencePiece.type");
        FT_CHECK(type >= 1 && type <= 6, source, ": sentencepiece model: piece ", index,
                 " has unknown type ", type,
                 " (expected 1..6: normal, unknown, control, user-defined, unused, byte)");
        piece->type = static_cast<PieceType>(type);
        break;
      }
      default: r.skip_field();
    }
  }
}

void parse_trainer_spec(Reader r, SentencePieceModel* m) {
  std::uint32_t field, wire;
  while (r.next_field(&field, &wire)) {
    switch (field) {
      case 3: m->model_type = r.read_int32("TrainerSpec.model_type"); break;
      case 24: m->treat_whitespace_as_suffix = r.read_bool("TrainerSpec.treat_whitespace_as_suffix"); break;
      case 35: m->byte_fallback = r.read_bool("TrainerSpec.byte_fallback"); break;
      case 40: m->unk_id = r.read_int32("TrainerSpec.unk_id"); break;
      case 41: m->bos_id = r.read_int32("TrainerSpec.bos_id"); break;
      case 42: m->eos_id = r.read_int32("TrainerSpec.eos_id"); break;
      case 43: m->pad_id = r.read_int32("TrainerSpec.pad_id"); break;
      case 44: m->unk_surface = std::string(r.read_bytes("TrainerSpec.unk_surface")); break;
      case 45: m->unk_piece = std::string(r.read_bytes("TrainerSpec.unk_piece")); break;
      case 46: m->bos_piece = std::string(r.read_bytes("TrainerSpec.bos_piece")); break;
      case 47: m->eos_piece = std::string(r.read_bytes("TrainerSpec.eos_piece")); break;
      case 48: m->pad_piece = std::string(r.read_bytes("TrainerSpec.pad_piece")); break;
      default: r.skip_field();
    }
  }
}

void parse_normalizer_spec(Reader r, SentencePieceModel* m, bool denormalizer) {
  std::uint32_t field, wire;
  while (r.next_field(&field, &wire)) {
    if (denormalizer) {
      if (field == 2)
        m->denormalizer_charsmap = std::string(r.read_bytes("NormalizerSpec.precompiled_charsmap"));
      else
        r.skip_field();
      continue;
    }
    switch (field) {
      case 1: m->normalizer_name = std::string(r.read_bytes("NormalizerSpec.name")); break;
      case 2:
        m->precompiled_charsmap = std::string(r.read_bytes("NormalizerSpec.precompiled_charsmap"));
        break;
      case 3: m->add_dummy_prefix = r.read_bool("NormalizerSpec.add_dummy_prefix"); break;
      case 4: m->remove_extra_whitespaces = r.read_bool("NormalizerSpec.remove_extra_whitespaces"); break;
      case 5: m->escape_whitespaces = r.read_bool("NormalizerSpec.escape_whitespaces"); break;
      default: r.skip_field();
    }
  }
}

}  // namespace

const char* model_type_name(std::int32_t type) {
  switch (type) {
    case 1: return "unigram";
    case 2: return "bpe";
    case 3: return "word";
    case 4: return "char";
  }
  return "unknown";
}

SentencePieceModel parse_sentencepiece_model(std::string_view bytes, const std::string& source) {
  SentencePieceModel m;
  FT_CHECK(!bytes.empty(), source,
           ": the sentencepiece model is empty (hint: the download may have failed)");
  Reader r(bytes, 0, bytes.size(), source, "ModelProto");
  std::uint32_t field, wire;
  while (r.next_field(&field, &wire)) {
    switch (field) {
      case 1: {
        Reader sub = r.read_message("ModelProto.pieces");
        m.pieces.emplace_back();
        parse_piece(sub, m.pieces.size() - 1, source, &m.pieces.back());
        break;
      }
      case 2: parse_trainer_spec(r.read_message("ModelProto.trainer_spec"), &m); break;
      case 3: parse_normalizer_spec(r.read_message("ModelProto.normalizer_spec"), &m, false); break;
      case 5: parse_normalizer_spec(r.read_message("ModelProto.denormalizer_spec"), &m, true); break;
      default: r.skip_field();
    }
  }
  return m;
}

}  // namespace ft::data
