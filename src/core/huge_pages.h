// Anonymous memory advised for 2 MB transparent huge pages: for bytes that are streamed whole again
// and again (a model's weight matrices every decode step, the KV cache's blocks, the bandwidth
// probe's buffer). With 4 KB
// pages a 300 MB matrix set is 75k pages to translate a token and a prefetcher that stops at every
// page edge; in huge pages a q4 decode ran 1.00-1.29x faster (median 1.13x), and the probe's 1 GiB
// buffer faults in 512 times fewer pages (docs/kernels.md, "Weights in huge pages").
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

namespace kvad {

// The kernel gives huge pages to memory that asks (its setting is `always` or `madvise`).
bool transparent_huge_pages_enabled();

// A zeroed region of `bytes`, starting on a 2 MB boundary and advised for huge pages (where the
// kernel has them off it is plain anonymous memory: the advice is only advice). Throws kvad::Error
// when the memory cannot be mapped.
class HugePageBuffer {
 public:
  static constexpr size_t kHugePage = size_t{2} << 20;

  // Reserved: the kernel counts the whole region against its commit limit when it is mapped (a
  // buffer about to be filled). OnTouch (MAP_NORESERVE): only the pages written cost anything, for
  // a pool sized for a whole budget and filled as it is used (the KV memory).
  enum class Commit { Reserved, OnTouch };

  HugePageBuffer() = default;
  explicit HugePageBuffer(size_t bytes, Commit commit = Commit::Reserved);
  ~HugePageBuffer();
  HugePageBuffer(HugePageBuffer&& other) noexcept;
  HugePageBuffer& operator=(HugePageBuffer&& other) noexcept;
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // Read-only from here on, as the file mapping a copy stands for was.
  void make_read_only();

 private:
  void release();
  uint8_t* data_ = nullptr;  // 2 MB aligned: the start of the mapping
  size_t size_ = 0;
  size_t length_ = 0;  // the mapping: size_ rounded up to whole 4 KB pages
};

// Zeroed memory for bytes a decode step streams whole (a weight matrix): in a HugePageBuffer from
// one huge page up, on the heap below (a huge page would hold the small ones and more). The
// pointer keeps its memory alive.
std::shared_ptr<uint8_t> allocate_streamed_bytes(size_t bytes);

}  // namespace kvad
