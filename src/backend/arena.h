// Scratch memory for one forward: a bump allocator over a few chunks, rewound at the start of
// each forward. A forward that needs more than any before it adds a chunk (at least the size of
// all the others, so there are few); later forwards reuse the same chunks in the same order, so
// they allocate nothing and touch no new page (a fresh merged chunk made the second forward
// fault its pages in again: docs/engine.md, "Scratch memory"). Pointers stay valid until the next
// reset, or a rewind past them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

namespace kvad {

class Arena {
 public:
  // Where the next allocation goes. An operation whose scratch is its own rewinds to its mark at
  // the end, so the next operation reuses those bytes (the MoE op's gathered rows and expert
  // outputs, a few MB a layer, were otherwise new memory in every layer of a forward).
  struct Mark {
    size_t chunk = 0, used = 0;
  };
  // The next allocations reuse the memory from the start.
  void reset() { rewind(Mark{}); }
  float* floats(size_t n);  // 64-byte aligned, uninitialised
  int32_t* ints(size_t n) { return reinterpret_cast<int32_t*>(floats(n)); }  // the same 4-byte cells
  Mark mark() const { return {chunk_, used_}; }
  void rewind(Mark m) { chunk_ = m.chunk, used_ = m.used; }
  // Rewinds at the end of a scope: `Arena::Scope scratch(arena);` in an operation whose
  // allocations are all its own (its output lives in memory allocated before).
  class Scope {
   public:
    explicit Scope(Arena& a) : arena_(a), mark_(a.mark()) {}
    ~Scope() { arena_.rewind(mark_); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Arena& arena_;
    Mark mark_;
  };
  size_t capacity_bytes() const;
  size_t chunks() const { return chunks_.size(); }

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
  size_t chunk_ = 0;  // the chunk allocations come from (== chunks_.size(): none yet)
  size_t used_ = 0;   // floats used in it
};

}  // namespace kvad
