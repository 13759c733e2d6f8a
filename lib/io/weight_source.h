// The weights of a Hugging Face model folder, wherever they live: one model.safetensors, or
// shards listed by model.safetensors.index.json ({"metadata": {...}, "weight_map": {name: file}}).
// Every shard is validated and every name in the index must be in the shard it names.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace ft::io {

class WeightSource {
 public:
  // `path` is a model folder, or a single .safetensors file.
  explicit WeightSource(const std::string& path);

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;
  // The file a tensor lives in, for error messages.
  const std::string& file_of(const std::string& name) const;
  at::Tensor load(const std::string& name) const;
  std::uint64_t total_bytes() const;

 private:
  const SafetensorsReader& reader_of(const std::string& name) const;

  std::string path_;
  std::vector<std::unique_ptr<SafetensorsReader>> readers_;
  std::map<std::string, std::size_t> where_;  // tensor name -> index into readers_
};

// True when `folder` holds model.safetensors or model.safetensors.index.json.
bool has_safetensors_weights(const std::string& folder);

}  // namespace ft::io
