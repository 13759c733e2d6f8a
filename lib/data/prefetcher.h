// Prefetcher<T>: runs a producer (read + collate the next batch) on a background thread, up to
// `depth` items ahead of the consumer, so the trainer does not wait on data. It keeps order, hands
// a producer's exception to the consumer, and records how long the consumer waited. One producer
// thread and one consumer; it does not parallelise the producer or pin memory.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

namespace ft::data {

template <typename T>
class Prefetcher {
 public:
  // Returns the next item, or nullopt at the end of the data. Called on the producer thread
  // (depth > 0) or inside next() (depth 0), never concurrently with itself.
  using Produce = std::function<std::optional<T>()>;

  // depth = most items produced ahead of the consumer (ready in the queue). 0 runs no thread:
  // next() calls produce itself.
  Prefetcher(Produce produce, std::size_t depth) : produce_(std::move(produce)), depth_(depth) {
    if (depth_ > 0) thread_ = std::thread([this] { run(); });
  }

  // Stops the producer and joins it. A producer waiting for room leaves at once; one inside
  // produce() is waited for (it cannot be interrupted) and its item is discarded.
  ~Prefetcher() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    room_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // The next item in production order; nullopt once the producer has returned nullopt (and on
  // every later call). If produce threw, the items produced before are returned first, then
  // this rethrows that exception (same type and message), on this and every later call.
  std::optional<T> next() {
    const auto start = Clock::now();
    std::optional<T> item = depth_ == 0 ? next_synchronous() : next_from_queue();
    waited_seconds_ += std::chrono::duration<double>(Clock::now() - start).count();
    if (item) ++delivered_;
    return item;
  }

  // Total time the consumer spent inside next(), i.e. waiting for data (the metrics' data-wait
  // time). With depth 0 that is all the time spent producing. Read it on the consumer thread.
  double waited_seconds() const { return waited_seconds_; }
  // Items next() has returned so far.
  std::int64_t delivered() const { return delivered_; }
  std::size_t depth() const { return depth_; }

 private:
  using Clock = std::chrono::steady_clock;

  std::optional<T> next_synchronous() {
    if (error_) std::rethrow_exception(error_);
    if (finished_) return std::nullopt;
    try {
      std::optional<T> item = produce_();
      if (!item) finished_ = true;
      return item;
    } catch (...) {
      error_ = std::current_exception();
      finished_ = true;
      throw;
    }
  }

  std::optional<T> next_from_queue() {
    std::unique_lock<std::mutex> lock(mutex_);
    ready_.wait(lock, [this] { return !queue_.empty() || finished_; });
    if (!queue_.empty()) {
      std::optional<T> item(std::move(queue_.front()));
      queue_.pop_front();
      lock.unlock();
      room_.notify_one();
      return item;
    }
    if (error_) std::rethrow_exception(error_);
    return std::nullopt;
  }

  // The producer thread: wait for room, produce outside the lock, enqueue; stop at the end of
  // the data, at the first exception (kept for the consumer) or when the owner is destroyed.
  void run() {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        room_.wait(lock, [this] { return stop_ || queue_.size() < depth_; });
        if (stop_) return;
      }
      std::optional<T> item;
      std::exception_ptr error;
      try {
        item = produce_();
      } catch (...) {
        error = std::current_exception();
      }
      bool done = true;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (error) {
          error_ = error;
          finished_ = true;
        } else if (!item) {
          finished_ = true;
        } else {
          try {
            queue_.push_back(std::move(*item));
            done = false;
          } catch (...) {  // e.g. bad_alloc: hand it to the consumer rather than terminate
            error_ = std::current_exception();
            finished_ = true;
          }
        }
      }
      ready_.notify_one();
      if (done) return;
    }
  }

  Produce produce_;
  const std::size_t depth_;

  std::mutex mutex_;
  std::condition_variable ready_;  // consumer waits: an item or the end is there
  std::condition_variable room_;   // producer waits: the queue has room, or stop
  std::deque<T> queue_;            // guarded by mutex_ (depth > 0)
  bool finished_ = false;          // produce returned nullopt or threw; guarded by mutex_
  bool stop_ = false;              // the destructor asks the producer to leave
  std::exception_ptr error_;       // what produce threw; guarded by mutex_ when threaded

  // Consumer-side counters (touched only by the thread that calls next()).
  double waited_seconds_ = 0;
  std::int64_t delivered_ = 0;
  std::thread thread_;  // started in the constructor body, once every member exists
};

}  // namespace ft::data
