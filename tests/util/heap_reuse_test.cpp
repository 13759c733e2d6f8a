// keep_freed_heap_memory: a block freed by one step is the next step's block, already faulted in.
// Counted with the process's minor page faults (getrusage), which is what the setting saves.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdlib>
#include <cstring>

#include "util/heap_reuse.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FT_SANITIZED_MALLOC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define FT_SANITIZED_MALLOC 1
#endif
#endif

namespace ft {
namespace {

long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// Writes every page of a fresh n-byte block, frees it, and returns the page faults that took.
long faults_to_fill_and_free(std::size_t n) {
  const long before = minor_faults();
  char* block = static_cast<char*>(std::malloc(n));
  EXPECT_NE(block, nullptr);
  std::memset(block, 1, n);
  asm volatile("" : : "r"(block) : "memory");  // the block is used: no allocation elided
  std::free(block);
  return minor_faults() - before;
}

TEST(HeapReuse, A64MiBBlockOfTheLastStepComesBackWithoutPageFaults) {
#if defined(FT_SANITIZED_MALLOC) || !defined(__GLIBC__)
  GTEST_SKIP() << "glibc's malloc only (a sanitizer brings its own)";
#else
  if (user_tuned_malloc()) GTEST_SKIP() << "malloc is tuned through the environment: the user's settings win";
  constexpr std::size_t kBlock = 64u << 20;  // over glibc's largest mmap threshold (32 MiB)
  const long pages = static_cast<long>(kBlock / 4096);
  // Without the setting glibc maps such a block afresh on every allocation: every page faults.
  EXPECT_GT(faults_to_fill_and_free(kBlock), pages / 2);
  keep_freed_heap_memory(StepMemory::kHost);
  faults_to_fill_and_free(kBlock);  // the first step grows the heap
  EXPECT_LT(faults_to_fill_and_free(kBlock), pages / 20) << "the freed block was not reused";
#endif
}

}  // namespace
}  // namespace ft
