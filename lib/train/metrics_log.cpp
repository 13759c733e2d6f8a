#include "train/metrics_log.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstring>

#include "util/error.h"
#include "util/file_util.h"

namespace ft::train {

MetricsLog::MetricsLog(const std::string& path, bool enabled) : path_(path) {
  if (!enabled) return;
  make_directories(parent_directory(path));
  file_ = std::fopen(path.c_str(), "a");
  FT_CHECK(file_ != nullptr, path, ": cannot open for appending: ", std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  if (file_ != nullptr) std::fclose(file_);
}

void MetricsLog::write(const Json& record) {
  if (file_ == nullptr) return;
  const std::string line = record.dump() + "\n";
  FT_CHECK(std::fwrite(line.data(), 1, line.size(), file_) == line.size() && std::fflush(file_) == 0, path_,
           ": write failed: ", std::strerror(errno));
}

std::int64_t peak_rss_bytes() {
  struct rusage usage;
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::int64_t>(usage.ru_maxrss) * 1024;
}

}  // namespace ft::train
