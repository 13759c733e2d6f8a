#include "io/weight_source.h"

#include <set>

#include "util/error.h"
#include "util/file_util.h"
#include "util/json.h"

namespace ft::io {
namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

}  // namespace

bool has_safetensors_weights(const std::string& folder) {
  return file_exists(join_path(folder, kSingleFile)) || file_exists(join_path(folder, kIndexFile));
}

WeightSource::WeightSource(const std::string& path) : path_(path) {
  if (!is_directory(path)) {
    readers_.push_back(std::make_unique<SafetensorsReader>(path));
  } else if (file_exists(join_path(path, kIndexFile))) {
    const std::string index_path = join_path(path, kIndexFile);
    Json index = parse_json_file(index_path, 8);
    FT_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
             index_path, ": expected an object with a \"weight_map\" object");
    std::map<std::string, std::size_t> shard_of_file;
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      FT_CHECK(it.value().is_string(), index_path, ": weight_map[\"", it.key(),
               "\"]: expected a file name, got ", describe_json(it.value()));
      const std::string file = it.value().get<std::string>();
      FT_CHECK(!file.empty() && file.find('/') == std::string::npos && file != "." && file != "..",
               index_path, ": weight_map[\"", it.key(), "\"]: \"", file,
               "\" is not a file name in the model folder");
      auto [slot, inserted] = shard_of_file.emplace(file, readers_.size());
      if (inserted) readers_.push_back(std::make_unique<SafetensorsReader>(join_path(path, file)));
      const SafetensorsReader& shard = *readers_[slot->second];
      FT_CHECK(shard.contains(it.key()), index_path, ": tensor '", it.key(), "' is mapped to ", file,
               ", which does not contain it");
      where_[it.key()] = slot->second;
    }
    FT_CHECK(!readers_.empty(), index_path, ": weight_map is empty");
    return;
  } else {
    const std::string single = join_path(path, kSingleFile);
    FT_CHECK(file_exists(single), path, ": no ", kSingleFile, " or ", kIndexFile,
             " (is this a Hugging Face model folder with safetensors weights?)");
    readers_.push_back(std::make_unique<SafetensorsReader>(single));
  }
  for (const TensorInfo& t : readers_[0]->tensors()) where_[t.name] = 0;
}

std::vector<std::string> WeightSource::names() const {
  std::vector<std::string> out;
  for (const auto& [name, _] : where_) out.push_back(name);
  return out;
}

const SafetensorsReader& WeightSource::reader_of(const std::string& name) const {
  auto it = where_.find(name);
  FT_CHECK(it != where_.end(), path_, ": no tensor named '", name, "'");
  return *readers_[it->second];
}

const TensorInfo& WeightSource::info(const std::string& name) const { return reader_of(name).info(name); }
const std::string& WeightSource::file_of(const std::string& name) const { return reader_of(name).path(); }
at::Tensor WeightSource::load(const std::string& name) const { return reader_of(name).load(name); }

std::uint64_t WeightSource::total_bytes() const {
  std::uint64_t total = 0;
  for (const auto& [name, i] : where_) {
    const TensorInfo& t = readers_[i]->info(name);
    total += t.end - t.begin;
  }
  return total;
}

}  // namespace ft::io
