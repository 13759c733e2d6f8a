#include "util/hash.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "util/error.h"

namespace ft {

std::uint64_t fnv1a64(const void* data, std::size_t size, std::uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t h = seed;
  for (std::size_t i = 0; i < size; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

std::uint32_t crc32(const void* data, std::size_t size, std::uint32_t crc) {
  const auto* p = static_cast<const Bytef*>(data);
  uLong value = crc;
  while (size > 0) {  // zlib takes uInt lengths
    const std::size_t n = std::min<std::size_t>(size, 1u << 30);
    value = ::crc32(value, p, static_cast<uInt>(n));
    p += n;
    size -= n;
  }
  return static_cast<std::uint32_t>(value);
}

std::uint32_t file_crc32(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  FT_CHECK(fd >= 0, path, ": cannot open: ", std::strerror(errno));
  std::vector<unsigned char> buffer(8 << 20);
  std::uint32_t crc = 0;
  while (true) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      FT_CHECK(false, path, ": read failed: ", std::strerror(err));
    }
    if (n == 0) break;
    crc = crc32(buffer.data(), static_cast<std::size_t>(n), crc);
  }
  ::close(fd);
  return crc;
}

std::string crc32_hex(std::uint32_t crc) {
  char buffer[9];
  std::snprintf(buffer, sizeof(buffer), "%08x", crc);
  return buffer;
}

std::string to_hex(std::uint64_t value) {
  char buffer[17];
  std::snprintf(buffer, sizeof(buffer), "%016llx", static_cast<unsigned long long>(value));
  return buffer;
}

}  // namespace ft
