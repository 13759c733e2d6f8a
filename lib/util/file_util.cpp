#include "util/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <algorithm>

#include "util/error.h"

namespace ft {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  FT_CHECK(in.good(), path, ": cannot open for reading: ", std::strerror(errno));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  FT_CHECK(!in.bad(), path, ": read failed");
  return buffer.str();
}

void write_all(int fd, const void* data, std::size_t size, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    FT_CHECK(n > 0, path, ": write failed: ", std::strerror(errno),
             errno == ENOSPC ? " (the disk is full)" : "");
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

void fsync_directory(const std::string& directory) {
  int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;  // best effort: some file systems do not allow opening directories
  ::fsync(fd);
  ::close(fd);
}

void write_file_atomic_with(const std::string& path, const std::function<void(int fd)>& write_body) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  FT_CHECK(fd >= 0, tmp, ": cannot create: ", std::strerror(errno));
  try {
    write_body(fd);
    FT_CHECK(::fsync(fd) == 0, tmp, ": fsync failed: ", std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    FT_CHECK(false, path, ": cannot rename ", tmp, " into place: ", std::strerror(err));
  }
  fsync_directory(parent_directory(path));
}

void write_file_atomic(const std::string& path, const std::string& contents) {
  write_file_atomic_with(path, [&](int fd) { write_all(fd, contents.data(), contents.size(), path); });
}

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::uint64_t file_size(const std::string& path) {
  struct stat st;
  FT_CHECK(::stat(path.c_str(), &st) == 0, path, ": cannot stat: ", std::strerror(errno));
  return static_cast<std::uint64_t>(st.st_size);
}

void make_directories(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  FT_CHECK(!ec, path, ": cannot create directory: ", ec.message());
}

std::string join_path(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (!b.empty() && b.front() == '/') return b;
  return a.back() == '/' ? a + b : a + "/" + b;
}

std::string current_directory() {
  std::error_code ec;
  const auto cwd = std::filesystem::current_path(ec);
  return ec ? std::string(".") : cwd.string();
}

std::string parent_directory(const std::string& path) {
  auto parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

void remove_tree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  FT_CHECK(!ec, path, ": cannot remove: ", ec.message());
}

void rename_path(const std::string& from, const std::string& to) {
  FT_CHECK(::rename(from.c_str(), to.c_str()) == 0, "cannot rename ", from, " to ", to, ": ", std::strerror(errno));
}

std::vector<std::string> list_directory(const std::string& path) {
  std::vector<std::string> names;
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec)) return names;
  for (const auto& entry : std::filesystem::directory_iterator(path, ec)) names.push_back(entry.path().filename().string());
  FT_CHECK(!ec, path, ": cannot list: ", ec.message());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace ft
