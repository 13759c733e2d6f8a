// ft::data::Prefetcher: order, the depth bound (counted, not timed), exceptions reaching the
// consumer, destruction while the producer is blocked or busy, depth 0, the waited-time metric
// (compared between cases, never against absolute times) and a stress run with many small
// items. Built also under ThreadSanitizer by hand (it needs nothing but the header and gtest).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "data/prefetcher.h"
#include "util/error.h"

namespace ft::data {
namespace {

using namespace std::chrono_literals;

// Produces 0, 1, ..., count - 1 and then the end.
std::function<std::optional<int>()> counting(int count) {
  auto next = std::make_shared<int>(0);
  return [next, count]() -> std::optional<int> {
    if (*next >= count) return std::nullopt;
    return (*next)++;
  };
}

// Polls `cond` until it holds or ~10 s pass (generous for loaded machines and sanitizers).
template <typename Cond>
bool eventually(Cond cond) {
  for (int i = 0; i < 10000; ++i) {
    if (cond()) return true;
    std::this_thread::sleep_for(1ms);
  }
  return cond();
}

TEST(PrefetcherTest, KeepsOrderAndEndsCleanly) {
  for (std::size_t depth : {0, 1, 2, 4, 8}) {
    SCOPED_TRACE("depth " + std::to_string(depth));
    Prefetcher<int> p(counting(1000), depth);
    for (int i = 0; i < 1000; ++i) {
      const std::optional<int> got = p.next();
      ASSERT_TRUE(got.has_value());
      ASSERT_EQ(*got, i);
    }
    EXPECT_FALSE(p.next().has_value());
    EXPECT_FALSE(p.next().has_value());  // the end stays the end
    EXPECT_EQ(p.delivered(), 1000);
  }
}

TEST(PrefetcherTest, ProducerNeverRunsMoreThanDepthAhead) {
  for (std::size_t depth : {1, 3, 8}) {
    SCOPED_TRACE("depth " + std::to_string(depth));
    // produce() begins at most `depth` items after the last next() the consumer began:
    // started <= requested + depth, checked by the producer at every start.
    std::atomic<std::int64_t> started{0};
    std::atomic<std::int64_t> requested{0};
    std::atomic<std::int64_t> max_ahead{-1000};
    int value = 0;
    {
      Prefetcher<int> p(
          [&]() -> std::optional<int> {
            const std::int64_t ahead = ++started - requested.load();
            if (ahead > max_ahead.load()) max_ahead = ahead;  // only this thread writes it
            if (value == 200) return std::nullopt;
            return value++;
          },
          depth);
      // A consumer that asks for nothing: the producer fills the queue and stops, exactly.
      ASSERT_TRUE(eventually([&] { return started.load() == static_cast<std::int64_t>(depth); }));
      std::this_thread::sleep_for(20ms);
      EXPECT_EQ(started.load(), static_cast<std::int64_t>(depth));
      // Taking one item makes room for exactly one more.
      ++requested;
      EXPECT_EQ(p.next(), 0);
      const std::int64_t one_more = static_cast<std::int64_t>(depth) + 1;
      ASSERT_TRUE(eventually([&] { return started.load() == one_more; }));
      std::this_thread::sleep_for(20ms);
      EXPECT_EQ(started.load(), one_more);
      // Then the rest, with a consumer that sometimes lags.
      for (int i = 1;; ++i) {
        ++requested;
        const std::optional<int> got = p.next();
        if (!got) break;
        EXPECT_EQ(*got, i);
        if (i % 16 == 0) std::this_thread::sleep_for(1ms);
      }
    }
    EXPECT_EQ(started.load(), 201);  // 200 items and the call that returned the end
    EXPECT_LE(max_ahead.load(), static_cast<std::int64_t>(depth));
    EXPECT_EQ(max_ahead.load(), static_cast<std::int64_t>(depth));  // and it did run ahead
  }
}

TEST(PrefetcherTest, DepthZeroProducesOnTheCallingThreadOnlyWhenAsked) {
  int calls = 0;
  std::thread::id producer_thread;
  auto inner = counting(3);
  Prefetcher<int> p(
      [&]() {
        ++calls;
        producer_thread = std::this_thread::get_id();
        return inner();
      },
      0);
  std::this_thread::sleep_for(10ms);
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(p.next(), 0);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(producer_thread, std::this_thread::get_id());
  EXPECT_EQ(p.next(), 1);
  EXPECT_EQ(p.next(), 2);
  EXPECT_FALSE(p.next().has_value());
  EXPECT_FALSE(p.next().has_value());
  EXPECT_EQ(calls, 4);  // produce is not called again after the end
}

TEST(PrefetcherTest, ProducerRunsOnAnotherThreadWithDepth) {
  std::atomic<bool> other_thread{false};
  const std::thread::id consumer = std::this_thread::get_id();
  auto inner = counting(2);
  Prefetcher<int> p(
      [&]() {
        other_thread = std::this_thread::get_id() != consumer;
        return inner();
      },
      2);
  EXPECT_EQ(p.next(), 0);
  EXPECT_TRUE(other_thread.load());
}

TEST(PrefetcherTest, ProducerExceptionReachesTheConsumerAfterEarlierItems) {
  for (std::size_t depth : {0, 1, 4}) {
    SCOPED_TRACE("depth " + std::to_string(depth));
    int value = 0;
    int calls_after_error = 0;
    Prefetcher<int> p(
        [&]() -> std::optional<int> {
          if (value == 3) {
            ++calls_after_error;
            throw ft::Error("token file 'train.bin': record 3 is truncated");
          }
          return value++;
        },
        depth);
    EXPECT_EQ(p.next(), 0);
    EXPECT_EQ(p.next(), 1);
    EXPECT_EQ(p.next(), 2);
    for (int attempt = 0; attempt < 2; ++attempt) {  // rethrown on every later call too
      try {
        p.next();
        ADD_FAILURE() << "next() did not throw";
      } catch (const ft::Error& e) {  // the original type, with its message
        EXPECT_STREQ(e.what(), "token file 'train.bin': record 3 is truncated");
      }
    }
    EXPECT_EQ(calls_after_error, 1);  // the producer stopped at the first exception
    EXPECT_EQ(p.delivered(), 3);
  }
}

TEST(PrefetcherTest, NonFtExceptionsKeepTheirType) {
  Prefetcher<int> p([]() -> std::optional<int> { throw std::out_of_range("index 9 of 4"); }, 2);
  EXPECT_THROW(
      {
        try {
          p.next();
        } catch (const std::out_of_range& e) {
          EXPECT_STREQ(e.what(), "index 9 of 4");
          throw;
        }
      },
      std::out_of_range);
}

TEST(PrefetcherTest, DestroyingEarlyJoinsABlockedOrBusyProducer) {
  // Blocked: an endless producer fills the queue and waits for room that never comes.
  for (std::size_t depth : {1, 4}) {
    std::atomic<int> started{0};
    {
      Prefetcher<int> p([&]() -> std::optional<int> { return started++; }, depth);
      EXPECT_EQ(p.next(), 0);
      ASSERT_TRUE(eventually([&] { return started.load() == static_cast<int>(depth) + 1; }));
    }  // must return, not hang
    EXPECT_EQ(started.load(), static_cast<int>(depth) + 1);
  }
  // Busy: destroyed while produce() is running; its item is dropped after it returns.
  std::atomic<bool> inside{false};
  {
    Prefetcher<std::string> p(
        [&]() -> std::optional<std::string> {
          inside = true;
          std::this_thread::sleep_for(50ms);
          return std::string("late");
        },
        2);
    ASSERT_TRUE(eventually([&] { return inside.load(); }));
  }
  // Never consumed at all, destroyed at once (the thread may not even have started).
  for (int i = 0; i < 200; ++i) {
    Prefetcher<int> p(counting(1 << 30), 1 + i % 3);
  }
}

TEST(PrefetcherTest, WaitedSecondsCountsOnlyTimeSpentWaitingForData) {
  constexpr int kItems = 5;
  auto slow_producer = [](int depth) {
    auto inner = counting(kItems);
    Prefetcher<int> p(
        [inner]() {
          std::this_thread::sleep_for(20ms);
          return inner();
        },
        depth);
    while (p.next()) {
    }
    return p.waited_seconds();
  };
  const double slow_threaded = slow_producer(2);
  const double slow_synchronous = slow_producer(0);
  EXPECT_GT(slow_threaded, 0.0);
  EXPECT_GT(slow_synchronous, 0.0);

  // A slow consumer with a fast producer: the data is always ready.
  Prefetcher<int> p(counting(kItems), 2);
  while (p.next()) std::this_thread::sleep_for(20ms);
  const double fast = p.waited_seconds();
  EXPECT_GE(fast, 0.0);
  EXPECT_LT(fast, slow_threaded);
  EXPECT_LT(fast, slow_synchronous);
}

TEST(PrefetcherTest, MoveOnlyItems) {
  int next = 0;
  Prefetcher<std::unique_ptr<int>> p(
      [&]() -> std::optional<std::unique_ptr<int>> {
        if (next == 10) return std::nullopt;
        return std::make_unique<int>(next++);
      },
      3);
  for (int i = 0; i < 10; ++i) {
    std::optional<std::unique_ptr<int>> got = p.next();
    ASSERT_TRUE(got && *got);
    EXPECT_EQ(**got, i);
  }
  EXPECT_FALSE(p.next().has_value());
}

TEST(PrefetcherTest, StressManySmallItems) {
  constexpr int kItems = 100000;
  for (std::size_t depth : {1, 2, 16}) {
    SCOPED_TRACE("depth " + std::to_string(depth));
    int produced = 0;
    Prefetcher<std::vector<int>> p(
        [&]() -> std::optional<std::vector<int>> {
          if (produced == kItems) return std::nullopt;
          const int v = produced++;
          return std::vector<int>{v, v + 1, v % 7};
        },
        depth);
    int expected = 0;
    while (std::optional<std::vector<int>> got = p.next()) {
      ASSERT_EQ(*got, (std::vector<int>{expected, expected + 1, expected % 7}));
      ++expected;
    }
    EXPECT_EQ(expected, kItems);
    EXPECT_EQ(p.delivered(), kItems);
  }
  // Many short lives with the consumer stopping at a different point each time.
  for (int i = 0; i < 300; ++i) {
    Prefetcher<int> p(counting(50), 1 + i % 4);
    for (int j = 0; j < i % 60; ++j) {
      const std::optional<int> got = p.next();
      if (j < 50) {
        ASSERT_EQ(got, j);
      } else {
        ASSERT_FALSE(got.has_value());
      }
    }
  }
}

}  // namespace
}  // namespace ft::data
