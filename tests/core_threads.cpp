// The thread pool's split of a range: every index is handed out exactly once, in chunks that are
// multiples of the grain (a kernel's 16-row tile never straddles two threads), one contiguous
// chunk per thread (each thread streams its own part of a weight matrix), whatever the thread
// count; a region started inside another runs inline.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "core/threads.h"

using namespace kvad;

TEST(ThreadPool, ParallelForCoversTheRangeOnceInOneGrainAlignedChunkPerThread) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool p(threads);
    for (int64_t n : {0, 1, 15, 16, 17, 100, 896, 4864, 151936})
      for (int64_t grain : {1, 16}) {
        SCOPED_TRACE(testing::Message() << threads << " threads, n=" << n << ", grain " << grain);
        std::vector<std::atomic<int>> seen((size_t)n);
        std::atomic<int> misaligned{0}, calls{0};
        std::mutex m;
        std::vector<std::thread::id> callers;
        p.parallel_for(n, grain, [&](int64_t b, int64_t e) {
          if (b % grain != 0 || (e != n && e % grain != 0) || b >= e) misaligned++;
          for (int64_t i = b; i < e; i++) seen[(size_t)i]++;
          calls++;
          std::lock_guard<std::mutex> lock(m);
          callers.push_back(std::this_thread::get_id());
        });
        EXPECT_EQ(misaligned.load(), 0);
        for (int64_t i = 0; i < n; i++) ASSERT_EQ(seen[(size_t)i].load(), 1) << "index " << i;
        const int64_t chunks = (n + grain - 1) / grain;
        EXPECT_EQ(calls.load(), std::min<int64_t>(threads, chunks));
        std::sort(callers.begin(), callers.end());
        EXPECT_EQ(std::unique(callers.begin(), callers.end()), callers.end()) << "a thread got two chunks";
      }
  }
}

TEST(ThreadPool, NestedRegionsRunInline) {
  ThreadPool p(2);
  std::atomic<int64_t> sum{0};
  p.parallel_for(4, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++)
      p.parallel_for(10, 1, [&](int64_t b2, int64_t e2) {
        EXPECT_EQ(b2, 0);  // inline: the whole inner range in one call
        EXPECT_EQ(e2, 10);
        for (int64_t j = b2; j < e2; j++) sum += i * 10 + j;
      });
  });
  EXPECT_EQ(sum.load(), 39 * 40 / 2);
}
