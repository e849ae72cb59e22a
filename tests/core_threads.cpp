// The thread pool's split of a range: every index is handed out exactly once, in chunks that are
// multiples of the grain (a kernel's 16-row tile never straddles two threads), one contiguous
// chunk per thread (each thread streams its own part of a weight matrix), whatever the thread
// count; a region started inside another runs inline. The balanced split hands out whole pieces,
// each once, and a thread that is held up has its pieces taken by the others.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <map>
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

// run() copies a small closure into the line the workers wait on and passes a large one by
// address: both kinds, back to back, each thread sees its own region's values (a copy left from
// the region before, or a torn one, would show as a wrong sum).
TEST(ThreadPool, SmallAndLargeClosuresEachReachEveryThread) {
  for (int threads : {2, 3}) {
    ThreadPool p(threads);
    for (int64_t round = 1; round <= 2000; round++) {
      std::vector<int64_t> got((size_t)threads, -1);
      int64_t* out = got.data();
      const int64_t a = round, b = 3 * round;  // small: two values and a pointer, copied
      p.run([out, a, b](int t, int) { out[t] = a + b + t; });
      for (int t = 0; t < threads; t++) ASSERT_EQ(got[(size_t)t], 4 * round + t) << "small closure, round " << round;
      std::array<int64_t, 12> big{};  // large: passed by address
      for (size_t i = 0; i < big.size(); i++) big[i] = round + (int64_t)i;
      p.run([out, big](int t, int) { out[t] = big[11] - big[0] + t; });
      for (int t = 0; t < threads; t++) ASSERT_EQ(got[(size_t)t], 11 + t) << "large closure, round " << round;
    }
  }
}

TEST(ThreadPool, NestedRegionsRunInline) {
  for (bool balanced : {false, true}) {
    SCOPED_TRACE(balanced ? "parallel_for_balanced inside" : "parallel_for inside");
    ThreadPool p(2);
    std::atomic<int64_t> sum{0};
    p.parallel_for(4, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; i++) {
        auto inner = [&](int64_t b2, int64_t e2) {
          EXPECT_EQ(b2, 0);  // inline: the whole inner range in one call
          EXPECT_EQ(e2, 10);
          for (int64_t j = b2; j < e2; j++) sum += i * 10 + j;
        };
        if (balanced) p.parallel_for_balanced(10, 3, inner);
        else p.parallel_for(10, 1, inner);
      }
    });
    EXPECT_EQ(sum.load(), 39 * 40 / 2);
  }
}

TEST(ThreadPool, BalancedParallelForHandsOutEveryPieceOnceInOrderWithinAShare) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool p(threads);
    for (int64_t n : {0, 1, 15, 16, 17, 100, 896, 4864})
      for (int64_t piece : {1, 3, 16}) {
        SCOPED_TRACE(testing::Message() << threads << " threads, n=" << n << ", piece " << piece);
        std::vector<std::atomic<int>> seen((size_t)n);
        std::atomic<int> bad{0};
        std::mutex m;
        std::map<std::thread::id, std::vector<int64_t>> starts;  // per thread, in the order taken
        p.parallel_for_balanced(n, piece, [&](int64_t b, int64_t e) {
          // Whole pieces (one thread or one piece: the whole range in one call, as parallel_for).
          bool whole = threads == 1 || n <= piece ? b == 0 && e == n : b % piece == 0 && (e % piece == 0 || e == n) && b < e;
          if (!whole) bad++;
          for (int64_t i = b; i < e; i++) seen[(size_t)i]++;
          std::lock_guard<std::mutex> lock(m);
          starts[std::this_thread::get_id()].push_back(b);
        });
        EXPECT_EQ(bad.load(), 0) << "a call was not whole pieces";
        for (int64_t i = 0; i < n; i++) ASSERT_EQ(seen[(size_t)i].load(), 1) << "index " << i;
        // Within a share a thread only moves forward (one stream), and it never returns to a share
        // it left. (Where it starts is not fixed: a thread that wakes late finds part of its own
        // share already taken.)
        const int64_t pieces = (n + piece - 1) / piece;
        const int nt = (int)std::min<int64_t>(threads, pieces);
        auto share_of = [&](int64_t b) {
          int64_t k = b / piece;
          int u = 0;
          while (u + 1 < nt && k >= pieces * (u + 1) / nt) u++;
          return u;
        };
        for (auto& [id, bs] : starts) {
          std::vector<int> left;
          for (size_t k = 1; k < bs.size(); k++) {
            if (share_of(bs[k]) == share_of(bs[k - 1])) {
              EXPECT_GT(bs[k], bs[k - 1]) << "went back within a share";
            } else {
              left.push_back(share_of(bs[k - 1]));
              EXPECT_EQ(std::count(left.begin(), left.end(), share_of(bs[k])), 0) << "returned to a share";
            }
          }
        }
      }
  }
}

TEST(ThreadPool, BalancedParallelForGivesAHeldUpThreadsPiecesToTheOthers) {
  // The worker holds the first pieces it takes until every other piece is done. Only the calling
  // thread can do them, the rest of the worker's share included; were the shares fixed, this
  // would wait out the 20 s limit and fail.
  ThreadPool p(2);
  const int64_t pieces = 64;
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<int64_t> done{0}, by_caller{0}, by_worker{0};
  std::atomic<bool> timed_out{false};
  p.parallel_for_balanced(pieces, 1, [&](int64_t b, int64_t e) {
    if (std::this_thread::get_id() == caller) {
      by_caller += e - b;
    } else {
      by_worker += e - b;
      auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (done.load() + (e - b) < pieces)
        if (std::chrono::steady_clock::now() > limit) {
          timed_out = true;
          break;
        }
    }
    done += e - b;
  });
  EXPECT_FALSE(timed_out.load()) << "the held-up thread's pieces were never taken";
  EXPECT_GT(by_caller.load(), pieces / 2) << "the caller did no more than its own share";
  EXPECT_EQ(by_caller.load() + by_worker.load(), pieces);
  EXPECT_EQ(done.load(), pieces);
}
