// A persistent thread pool. Workers spin briefly on a generation counter and then sleep on it
// (futex via std::atomic::wait), so a parallel region costs microseconds, not a thread start.
// The calling thread is worker 0 and always takes part.
#pragma once
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace kvad {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(thread_index, n_threads) once on each thread and returns when all are done.
  template <typename F>
  void run(F&& fn) {
    if (n_threads_ == 1 || in_region_) {  // nested regions run inline
      fn(0, 1);
      return;
    }
    auto tramp = [](void* ctx, int i, int n) { (*static_cast<std::remove_reference_t<F>*>(ctx))(i, n); };
    dispatch(tramp, (void*)&fn);
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

 private:
  using Tramp = void (*)(void*, int, int);
  void dispatch(Tramp tramp, void* ctx);
  void worker_loop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  alignas(64) std::atomic<uint32_t> generation_{0};
  alignas(64) std::atomic<int> pending_{0};
  Tramp tramp_ = nullptr;
  void* ctx_ = nullptr;
  bool stop_ = false;
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
