#include "core/threads.h"

#include <memory>

#include "core/cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
static inline void cpu_relax() { _mm_pause(); }
#else
static inline void cpu_relax() {}
#endif

namespace kvad {

// Spin this many times before sleeping: long enough to catch back-to-back matmuls in a forward
// pass, short enough not to burn a core that another process (or the next matmul) needs.
static constexpr int kSpinIters = 20000;

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(n_threads < 1 ? 1 : n_threads), shares_(std::make_unique<Share[]>((size_t)n_threads_)) {
  for (int i = 1; i < n_threads_; i++) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  start_.stop = true;
  start_.generation.fetch_add(1);
  start_.generation.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::dispatch(Tramp tramp, void* ctx) {
  start_.tramp = tramp;
  start_.ctx = ctx;
  pending_.store(n_threads_ - 1);
  start_.generation.fetch_add(1);
  start_.generation.notify_all();
  in_region_ = true;
  tramp(ctx, 0, n_threads_);
  in_region_ = false;
  int spins = 0;
  while (pending_.load() != 0) {
    if (++spins < kSpinIters) cpu_relax();
    else std::this_thread::yield();
  }
}

void ThreadPool::worker_loop(int index) {
  uint32_t seen = 0;
  in_region_ = true;
  for (;;) {
    int spins = 0;
    uint32_t g;
    while ((g = start_.generation.load()) == seen) {
      if (++spins < kSpinIters) {
        cpu_relax();
      } else {
        start_.generation.wait(seen);
      }
    }
    seen = g;
    if (start_.stop) return;
    start_.tramp(start_.ctx, index, n_threads_);
    pending_.fetch_sub(1);
  }
}

static std::unique_ptr<ThreadPool>& pool_slot() {
  static std::unique_ptr<ThreadPool> p;
  return p;
}

int default_threads() { return cpu_features().logical_cores; }

ThreadPool& pool() {
  auto& p = pool_slot();
  if (!p) p = std::make_unique<ThreadPool>(default_threads());
  return *p;
}

void set_threads(int n) {
  auto& p = pool_slot();
  if (n < 1) n = default_threads();
  if (p && p->size() == n) return;
  p.reset();
  p = std::make_unique<ThreadPool>(n);
}

}  // namespace kvad
