#include "io/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <unordered_set>

#include <torch/torch.h>

#include "util/error.h"
#include "util/file_util.h"
#include "util/json.h"
#include "util/mapped_file.h"

namespace ft::io {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors is little-endian");

std::int64_t TensorInfo::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

namespace {

std::uint64_t read_u64_le(const std::uint8_t* p) {
  std::uint64_t v = 0;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// A non-negative JSON integer that fits in uint64, or an error naming the field.
std::uint64_t json_to_u64(const Json& value, const std::string& where) {
  FT_CHECK(value.is_number_unsigned() || (value.is_number_integer() && value.get<std::int64_t>() >= 0),
           where, ": expected a non-negative integer, got ", describe_json(value));
  return value.get<std::uint64_t>();
}

TensorInfo parse_entry(const std::string& name, const Json& entry, const std::string& source) {
  const std::string where = source + ": tensor '" + name + "'";
  FT_CHECK(entry.is_object(), where, ": expected an object with dtype, shape and data_offsets, got ",
           describe_json(entry));
  for (const char* key : {"dtype", "shape", "data_offsets"})
    FT_CHECK(entry.contains(key), where, ": missing \"", key, "\"");
  for (auto it = entry.begin(); it != entry.end(); ++it)
    FT_CHECK(it.key() == "dtype" || it.key() == "shape" || it.key() == "data_offsets", where,
             ": unexpected field \"", it.key(), "\"");

  TensorInfo info;
  info.name = name;
  const Json& dtype = entry["dtype"];
  FT_CHECK(dtype.is_string(), where, ": dtype must be a string, got ", describe_json(dtype));
  info.dtype = find_safetensors_dtype(dtype.get<std::string>());
  FT_CHECK(info.dtype != nullptr, where, ": unknown dtype \"", dtype.get<std::string>(),
           "\" (expected one of ", known_safetensors_dtypes(), ")");

  const Json& shape = entry["shape"];
  FT_CHECK(shape.is_array(), where, ": shape must be an array, got ", describe_json(shape));
  std::uint64_t numel = 1;
  bool overflow = false;
  for (const Json& d : shape) {
    std::uint64_t dim = json_to_u64(d, where + " shape");
    FT_CHECK(dim <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()), where,
             ": dimension ", dim, " is too large");
    info.shape.push_back(static_cast<std::int64_t>(dim));
    overflow |= __builtin_mul_overflow(numel, dim, &numel);
  }
  std::uint64_t bits = 0;
  overflow |= __builtin_mul_overflow(numel, info.dtype->bits, &bits);
  FT_CHECK(!overflow && numel <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()),
           where, ": shape ", shape.dump(), " has too many elements");
  FT_CHECK(bits % 8 == 0, where, ": ", numel, " elements of ", info.dtype->name,
           " do not fill whole bytes");

  const Json& offsets = entry["data_offsets"];
  FT_CHECK(offsets.is_array() && offsets.size() == 2, where,
           ": data_offsets must be [begin, end], got ", describe_json(offsets));
  info.begin = json_to_u64(offsets[0], where + " data_offsets[0]");
  info.end = json_to_u64(offsets[1], where + " data_offsets[1]");
  FT_CHECK(info.begin <= info.end, where, ": data_offsets [", info.begin, ", ", info.end,
           "] end before they begin");
  FT_CHECK(info.end - info.begin == bits / 8, where, ": shape ", shape.dump(), " of ",
           info.dtype->name, " needs ", bits / 8, " bytes but data_offsets [", info.begin, ", ",
           info.end, "] span ", info.end - info.begin);
  return info;
}

}  // namespace

SafetensorsHeader parse_safetensors_header(const std::uint8_t* data, std::size_t size,
                                           const std::string& source) {
  FT_CHECK(size >= 8, source, ": not a safetensors file (", size,
           " bytes, shorter than the 8-byte header length)");
  const std::uint64_t header_len = read_u64_le(data);
  FT_CHECK(header_len <= kMaxSafetensorsHeaderBytes, source, ": header length ", header_len,
           " exceeds the ", kMaxSafetensorsHeaderBytes, "-byte limit (not a safetensors file?)");
  FT_CHECK(header_len <= size - 8, source, ": truncated: the header claims ", header_len,
           " bytes but only ", size - 8, " follow the length field");
  FT_CHECK(header_len >= 2 && data[8] == '{', source,
           ": not a safetensors file (the header does not start with '{')");

  std::string_view text(reinterpret_cast<const char*>(data + 8), header_len);
  // A safetensors header nests three levels ({name: {shape: [...]}}); anything deeper is hostile.
  Json header = parse_json(text, source + " header", 4);
  FT_CHECK(header.is_object(), source, ": the header must be a JSON object");

  SafetensorsHeader out;
  out.data_start = 8 + header_len;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      FT_CHECK(it.value().is_object(), source, ": __metadata__ must be an object of strings");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        FT_CHECK(m.value().is_string(), source, ": __metadata__ \"", m.key(),
                 "\" must be a string, got ", describe_json(m.value()));
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    out.tensors.push_back(parse_entry(it.key(), it.value(), source));
  }
  // nlohmann keeps only the last of duplicate names; the dropped entry's bytes then show up as
  // a hole in the contiguity check below, so a duplicate cannot silently lose data.
  std::sort(out.tensors.begin(), out.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const std::uint64_t buffer_size = size - out.data_start;
  std::uint64_t expected_begin = 0;
  for (const TensorInfo& t : out.tensors) {
    FT_CHECK(t.begin == expected_begin, source, ": tensor '", t.name, "' data_offsets [", t.begin,
             ", ", t.end, "] ", t.begin < expected_begin ? "overlap the previous tensor" : "leave a hole",
             " (expected it to begin at ", expected_begin, ")");
    expected_begin = t.end;
  }
  FT_CHECK(expected_begin <= buffer_size, source, ": truncated: tensors need ", expected_begin,
           " bytes of data but the file holds ", buffer_size);
  FT_CHECK(expected_begin == buffer_size, source, ": ", buffer_size - expected_begin,
           " bytes after the last tensor belong to no tensor");
  return out;
}

SafetensorsReader::SafetensorsReader(const std::string& path)
    : path_(path), file_(std::make_unique<MappedFile>(path)) {
  header_ = parse_safetensors_header(file_->data(), file_->size(), path);
  for (std::size_t i = 0; i < header_.tensors.size(); ++i) {
    bool inserted = index_.emplace(header_.tensors[i].name, i).second;
    FT_CHECK(inserted, path, ": tensor '", header_.tensors[i].name, "' appears twice");
  }
}

SafetensorsReader::~SafetensorsReader() = default;
SafetensorsReader::SafetensorsReader(SafetensorsReader&&) noexcept = default;
SafetensorsReader& SafetensorsReader::operator=(SafetensorsReader&&) noexcept = default;

const TensorInfo& SafetensorsReader::info(const std::string& name) const {
  auto it = index_.find(name);
  FT_CHECK(it != index_.end(), path_, ": no tensor named '", name, "'");
  return header_.tensors[it->second];
}

at::Tensor SafetensorsReader::load(const std::string& name) const {
  const TensorInfo& t = info(name);
  FT_CHECK(t.dtype->scalar.has_value(), path_, ": tensor '", name, "' has dtype ", t.dtype->name,
           ", which this LibTorch cannot hold");
  at::Tensor out = torch::empty(t.shape, torch::TensorOptions().dtype(*t.dtype->scalar));
  const std::uint64_t nbytes = t.end - t.begin;
  FT_ASSERT(static_cast<std::uint64_t>(out.nbytes()) == nbytes, "validated header");
  if (nbytes > 0) std::memcpy(out.data_ptr(), file_->data() + header_.data_start + t.begin, nbytes);
  return out;
}

at::Tensor SafetensorsReader::view(const std::string& name) const {
  const TensorInfo& t = info(name);
  FT_CHECK(t.dtype->scalar.has_value(), path_, ": tensor '", name, "' has dtype ", t.dtype->name,
           ", which this LibTorch cannot hold");
  const auto type = *t.dtype->scalar;
  const std::uint8_t* data = file_->data() + header_.data_start + t.begin;
  FT_CHECK(reinterpret_cast<std::uintptr_t>(data) % c10::elementSize(type) == 0, path_, ": tensor '", name,
           "' is not aligned for its dtype");
  return torch::from_blob(const_cast<std::uint8_t*>(data), t.shape, torch::TensorOptions().dtype(type));
}

std::string safetensors_header_json(const NamedTensors& tensors,
                                    const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  Json meta = Json::object();
  meta["format"] = "pt";
  for (const auto& [k, v] : metadata) meta[k] = v;
  header["__metadata__"] = meta;
  std::uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    FT_CHECK(name != "__metadata__", "a tensor cannot be named __metadata__");
    FT_CHECK(!header.contains(name), "write_safetensors: tensor '", name, "' given twice");
    std::uint64_t nbytes = static_cast<std::uint64_t>(tensor.numel()) * tensor.element_size();
    header[name] = {{"dtype", safetensors_dtype_name(tensor.scalar_type())},
                    {"shape", tensor.sizes().vec()},
                    {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string text = header.dump();
  // Pad with spaces so that 8 + len is a multiple of 8: the data then starts aligned.
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');
  return text;
}

SafetensorsStreamWriter::SafetensorsStreamWriter(const std::string& path, std::vector<Entry> entries,
                                                 const std::map<std::string, std::string>& metadata)
    : path_(path), tmp_(path + ".tmp." + std::to_string(::getpid())), entries_(std::move(entries)) {
  NamedTensors shapes_only;  // zero-strided stand-ins: only dtype and shape are read
  for (const Entry& e : entries_)
    shapes_only.emplace_back(e.name, torch::empty({}, torch::TensorOptions().dtype(e.dtype)).expand(e.shape));
  const std::string header = safetensors_header_json(shapes_only, metadata);
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  FT_CHECK(fd_ >= 0, tmp_, ": cannot create: ", std::strerror(errno));
  const std::uint64_t len = header.size();
  write_all(fd_, &len, sizeof(len), tmp_);
  write_all(fd_, header.data(), header.size(), tmp_);
}

SafetensorsStreamWriter::~SafetensorsStreamWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void SafetensorsStreamWriter::write(const std::string& name, const at::Tensor& tensor) {
  FT_ASSERT(next_ < entries_.size() && entries_[next_].name == name, "tensors written in the declared order: ", name);
  const Entry& e = entries_[next_++];
  FT_CHECK(tensor.sizes() == at::IntArrayRef(e.shape), path_, ": tensor '", name, "' has shape ", tensor.sizes(),
           ", declared ", at::IntArrayRef(e.shape));
  at::Tensor cpu = tensor.detach().to(torch::kCPU, e.dtype).contiguous();
  if (cpu.nbytes() > 0) write_all(fd_, cpu.data_ptr(), cpu.nbytes(), tmp_);
}

void SafetensorsStreamWriter::finish() {
  FT_ASSERT(next_ == entries_.size(), "every declared tensor written before finish()");
  FT_CHECK(::fsync(fd_) == 0, tmp_, ": fsync failed: ", std::strerror(errno));
  ::close(fd_);
  fd_ = -1;
  FT_CHECK(::rename(tmp_.c_str(), path_.c_str()) == 0, path_, ": cannot rename ", tmp_, " into place: ",
           std::strerror(errno));
  fsync_directory(parent_directory(path_));
}

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string header = safetensors_header_json(tensors, metadata);
  write_file_atomic_with(path, [&](int fd) {
    std::uint64_t len = header.size();
    write_all(fd, &len, sizeof(len), path);
    write_all(fd, header.data(), header.size(), path);
    for (const auto& [name, tensor] : tensors) {
      at::Tensor cpu = tensor.detach().to(torch::kCPU).contiguous();
      if (cpu.nbytes() > 0) write_all(fd, cpu.data_ptr(), cpu.nbytes(), path);
    }
  });
}

}  // namespace ft::io
