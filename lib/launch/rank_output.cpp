#include "launch/rank_output.h"

#include <unistd.h>

#include <cerrno>

namespace ft::launch {

std::string LinePrefixer::feed(const char* data, std::size_t n) {
  partial_.append(data, n);
  std::size_t start = 0;
  std::string block;
  for (std::size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1) {
    block += prefix_;
    block.append(partial_, start, nl - start + 1);
  }
  partial_.erase(0, start);
  return block;
}

std::string LinePrefixer::finish() {
  std::string rest = partial_.empty() ? "" : prefix_ + partial_ + "\n";
  partial_.clear();
  return rest;
}

std::string rank_prefix(int rank) { return "[rank " + std::to_string(rank) + "] "; }

void write_all(int fd, const std::string& text) {
  const char* p = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // our own stdout is gone: nothing better to do than drop it
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

}  // namespace ft::launch
