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

void truncate_metrics(const std::string& path, std::int64_t step, bool keep_eval_at_step) {
  if (!file_exists(path)) return;
  const std::string text = read_file(path);
  std::string kept;
  std::size_t begin = 0;
  while (begin < text.size()) {
    std::size_t end = text.find('\n', begin);
    if (end == std::string::npos) break;  // a torn last line
    const std::string line = text.substr(begin, end - begin);
    begin = end + 1;
    Json record;
    try {
      record = parse_json(line, path);
    } catch (const Error&) {
      continue;
    }
    if (record.is_object() && record.contains("step") && record["step"].is_number_integer()) {
      const std::int64_t s = record["step"].get<std::int64_t>();
      if (s > step) continue;
      if (s == step && record.contains("eval_loss") && !keep_eval_at_step) continue;
    }
    kept += line + "\n";
  }
  write_file_atomic(path, kept);
}

std::int64_t peak_rss_bytes() {
  struct rusage usage;
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::int64_t>(usage.ru_maxrss) * 1024;
}

}  // namespace ft::train
