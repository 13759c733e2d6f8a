// RUN_DIR/metrics.jsonl: one JSON object per logged step or evaluation, written (rank 0 only)
// and flushed line by line so that a crash loses nothing already logged and tests or plots can
// read it while the run goes on.
#pragma once

#include <cstdio>
#include <string>

#include "util/json.h"

namespace ft::train {

class MetricsLog {
 public:
  // Opens `path` for appending (a resumed run continues the same file); `enabled` false (ranks
  // other than 0) makes every call a no-op.
  MetricsLog(const std::string& path, bool enabled);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  void write(const Json& record);

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
};

// For a run resumed from the checkpoint of `step`: drops the records that the interrupted run
// logged after it (they are logged again), and the evaluation at `step` itself unless
// keep_eval_at_step (an evaluation inside the loop comes before that step's checkpoint; the
// final one after it). A torn last line is dropped too. Rewrites the file atomically.
void truncate_metrics(const std::string& path, std::int64_t step, bool keep_eval_at_step);

// Peak resident memory of this process (bytes), from getrusage: a CPU-side upper bound until
// the counting allocator of the memory planner is installed.
std::int64_t peak_rss_bytes();

}  // namespace ft::train
