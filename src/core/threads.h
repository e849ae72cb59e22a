// A persistent thread pool. Workers spin briefly on a generation counter and then sleep on it
// (futex via std::atomic::wait), so a parallel region costs microseconds, not a thread start.
// The calling thread is worker 0 and always takes part.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

namespace kvad {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // Every region this thread starts runs inline from now on: for a child process after fork(),
  // whose copy of the pool has no workers (core/cpu.cpp's first_run_failure).
  static void run_inline_on_this_thread() { in_region_ = true; }

  // Calls fn(thread_index, n_threads) once on each thread and returns when all are done.
  template <typename F>
  void run(F&& fn) {
    if (n_threads_ == 1 || in_region_) {  // nested regions run inline
      fn(0, 1);
      return;
    }
    using Fn = std::remove_reference_t<F>;
    auto tramp = [](void* ctx, int i, int n) { (*static_cast<Fn*>(ctx))(i, n); };
    if constexpr (std::is_trivially_copyable_v<Fn> && sizeof(Fn) <= sizeof(Start::closure) &&
                  alignof(Fn) <= alignof(Start)) {
      // A small closure travels in the start line itself: one transfer fewer before a worker
      // knows what to run (its captures still live where the caller put them).
      std::memcpy(start_.closure, (const void*)&fn, sizeof(Fn));
      dispatch(tramp, start_.closure);
    } else {
      dispatch(tramp, (void*)&fn);
    }
  }

  // Splits [0, n) into one contiguous chunk per thread, in multiples of `grain`.
  template <typename F>
  void parallel_for(int64_t n, int64_t grain, F&& fn) {
    if (n <= 0) return;
    int64_t chunks = (n + grain - 1) / grain;
    int nt = (int)std::min<int64_t>(n_threads_, chunks);
    // Inside another region run() calls its function once, as thread 0 of 1: the whole range
    // here, not thread 0's share of nt (which dropped the other threads' shares).
    if (nt <= 1 || in_region_) {
      fn(int64_t{0}, n);
      return;
    }
    run([&](int t, int) {
      if (t >= nt) return;
      int64_t c0 = chunks * t / nt, c1 = chunks * (t + 1) / nt;
      int64_t b = c0 * grain, e = std::min(n, c1 * grain);
      if (b < e) fn(b, e);
    });
  }

  // Like parallel_for, for work whose pieces cost the same (a matrix product's rows): [0, n) is
  // cut into pieces of `piece` items and each thread takes the pieces of its own contiguous share
  // in order, then the pieces still left in the others' shares. A thread that a neighbour
  // preempts, or that reads memory slower, no longer holds the whole region up (docs/kernels.md,
  // "Threads that finish together"). Each take is half of what is left of a share, at least one
  // piece: a locked add per 32 KB piece made the decode stacks 5-10% slower (it waits for the
  // loads in flight), halving takes ~log2(pieces) of them. fn(b, e) gets whole pieces; on one thread, for
  // one piece or inside another region, the whole range in one call.
  template <typename F>
  void parallel_for_balanced(int64_t n, int64_t piece, F&& fn) {
    if (n <= 0) return;
    piece = std::max<int64_t>(piece, 1);
    int64_t pieces = (n + piece - 1) / piece;
    int nt = (int)std::min<int64_t>(n_threads_, pieces);
    if (nt <= 1 || in_region_) {
      fn(int64_t{0}, n);
      return;
    }
    for (int t = 0; t < nt; t++) {  // published to the workers by dispatch's generation increment
      shares_[t].next.store(pieces * t / nt, std::memory_order_relaxed);
      shares_[t].end = pieces * (t + 1) / nt;
    }
    Share* shares = shares_.get();
    run([shares, nt, n, piece, &fn](int t, int) {
      for (int k = 0; k < nt; k++) {  // its own share first (t % nt), then the next ones'
        Share& s = shares[(t + k) % nt];
        for (;;) {
          const int64_t left = s.end - s.next.load(std::memory_order_relaxed);
          if (left <= 0) break;
          const int64_t take = std::max<int64_t>(1, left / 2);
          const int64_t p = s.next.fetch_add(take, std::memory_order_relaxed);
          if (p >= s.end) break;
          fn(p * piece, std::min(n, std::min(p + take, s.end) * piece));
        }
      }
    });
  }

  // Items per piece for parallel_for_balanced when one item streams `item_bytes` of weights:
  // ~32 KB a piece, a microsecond of one thread's reading, so the wait on the last piece is short.
  static int64_t items_per_piece(int64_t item_bytes) {
    return std::max<int64_t>(1, (int64_t{32} << 10) / std::max<int64_t>(item_bytes, 1));
  }
  // The same rounded up to an even count, at least 2: for a prefill tile that takes two items
  // (groups of 16 rows) at a time, so no piece ends in a one-item tile (5-18% slower).
  static int64_t item_pairs_per_piece(int64_t item_bytes) {
    const int64_t piece = std::max<int64_t>(items_per_piece(item_bytes), 2);
    return piece + (piece & 1);
  }

 private:
  using Tramp = void (*)(void*, int, int);
  void dispatch(Tramp tramp, void* ctx);
  void worker_loop(int index);

  // One thread's share of a parallel_for_balanced region: the next piece to take and its end.
  struct alignas(64) Share {
    std::atomic<int64_t> next{0};
    int64_t end = 0;
  };

  int n_threads_;
  std::unique_ptr<Share[]> shares_;
  std::vector<std::thread> workers_;
  // What a worker reads to start a region shares the generation's cache line, so the one transfer
  // that tells it a region began also brings the function to run (on a 2-vCPU Zen 5 guest each
  // cross-core line transfer is ~60-300 ns, and a worker's start waited on three in a row).
  struct alignas(64) Start {
    std::atomic<uint32_t> generation{0};
    bool stop = false;
    Tramp tramp = nullptr;
    void* ctx = nullptr;
    alignas(8) unsigned char closure[40];
  } start_;
  static_assert(sizeof(Start) == 64, "the start of a region is one cache line");
  alignas(64) std::atomic<int> pending_{0};  // written by the workers: a line of its own
  // Defined here (constant-initialised, inline), so every file reads it directly. Declared here
  // and defined in threads.cpp, readers elsewhere went through a TLS wrapper call, and the
  // sanitizer build reported a load through a null pointer there (kernels/matmul.cpp's
  // parallel_for, once it read the flag too).
  static inline thread_local bool in_region_ = false;
};

// The process-wide pool used by the kernels. set_threads() replaces it (call before heavy work).
ThreadPool& pool();
void set_threads(int n);
int default_threads();

}  // namespace kvad
