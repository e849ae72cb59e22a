// Scratch memory for one forward: a bump allocator reset at the start of each forward. It grows
// (one heap allocation) only when a batch needs more than any before it; a steady stream of decode
// steps allocates nothing. Pointers stay valid until the next reset.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

namespace kvad {

class Arena {
 public:
  // The next allocations reuse the memory. After a forward that overflowed into extra chunks, the
  // chunks are merged into one that holds that whole forward.
  void reset();
  float* floats(size_t n);  // 64-byte aligned, uninitialised
  int32_t* ints(size_t n) { return reinterpret_cast<int32_t*>(floats(n)); }  // the same 4-byte cells
  size_t capacity_bytes() const;

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  struct Chunk {
    std::unique_ptr<float[], Free> mem;
    size_t size = 0;  // floats
  };
  static Chunk make_chunk(size_t floats);
  std::vector<Chunk> chunks_;
  size_t used_ = 0;  // floats used in the last chunk
};

}  // namespace kvad
