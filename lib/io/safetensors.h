// safetensors files (huggingface/safetensors format): a validating, memory-mapped reader and an
// atomic writer. The reader checks the whole header before any tensor is touched: header length
// within the file, JSON well-formed, every dtype known, every shape's byte size equal to its
// offset range, offsets contiguous from 0 to the end of the file with no overlap or hole.
// Tensors are copied out of the map, so a loaded tensor never aliases the file.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "io/dtype.h"

namespace ft {
class MappedFile;
}

namespace ft::io {

// Refuse headers above this size before allocating anything (as the reference readers do).
constexpr std::uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

struct TensorInfo {
  std::string name;
  const SafetensorsDType* dtype = nullptr;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;  // byte offsets relative to the start of the data buffer
  std::uint64_t end = 0;

  std::int64_t numel() const;
};

struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;  // sorted by begin offset
  std::map<std::string, std::string> metadata;
  std::uint64_t data_start = 0;  // 8 + header length: where the data buffer begins in the file
};

// Parses and validates the header of a complete safetensors file held in [data, data + size).
// `source` names the file in error messages. Never reads outside the given bytes. Also the
// entry point of the fuzz target (fuzz/safetensors_header_fuzz.cpp).
SafetensorsHeader parse_safetensors_header(const std::uint8_t* data, std::size_t size,
                                           const std::string& source);

class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::string& path);
  ~SafetensorsReader();
  SafetensorsReader(SafetensorsReader&&) noexcept;
  SafetensorsReader& operator=(SafetensorsReader&&) noexcept;

  const std::string& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  // Throws ft::Error naming the file and the tensor when it is absent.
  const TensorInfo& info(const std::string& name) const;
  // A CPU tensor owning a copy of the stored bytes, in the stored dtype.
  at::Tensor load(const std::string& name) const;
  // The stored bytes in place, without a copy: read-only, valid while the reader lives, and
  // only for data that is aligned for its dtype (writers here align every tensor).
  at::Tensor view(const std::string& name) const;

 private:
  std::string path_;
  std::unique_ptr<MappedFile> file_;
  SafetensorsHeader header_;
  std::unordered_map<std::string, std::size_t> index_;
};

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// Writes `tensors` (any device; copied to CPU one at a time) in the given order, with
// __metadata__ = {"format": "pt"} plus `metadata`, the header padded with spaces so the data
// starts 8-byte aligned. Atomic: a crash leaves the old file or the new one. Names must be unique.
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Writes a safetensors file tensor by tensor, so that a model gathered one layer at a time is
// never whole in memory: the header is written from the declared names, dtypes and shapes, then
// each tensor's bytes in the declared order. finish() fsyncs and renames into place atomically;
// a writer destroyed before finish() leaves no file.
class SafetensorsStreamWriter {
 public:
  struct Entry {
    std::string name;
    c10::ScalarType dtype;
    std::vector<std::int64_t> shape;
  };
  SafetensorsStreamWriter(const std::string& path, std::vector<Entry> entries,
                          const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsStreamWriter();
  // The next declared tensor (any device; converted to the declared dtype).
  void write(const std::string& name, const at::Tensor& tensor);
  void finish();

 private:
  std::string path_, tmp_;
  std::vector<Entry> entries_;
  std::size_t next_ = 0;
  int fd_ = -1;
};

// The header JSON write_safetensors would produce (without the 8-byte length), for tests.
std::string safetensors_header_json(const NamedTensors& tensors,
                                    const std::map<std::string, std::string>& metadata);

}  // namespace ft::io
