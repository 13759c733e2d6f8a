// A read-only memory map of a whole file (RAII). Safetensors weights and token files are read
// through it so that a 26 GB model is paged in on demand rather than copied up front.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ft {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  // throws ft::Error naming the path
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace ft
