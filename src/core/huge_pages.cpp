#include "core/huge_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include "core/error.h"

namespace kvad {

bool transparent_huge_pages_enabled() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(f, line);
  return line.find("[always]") != std::string::npos || line.find("[madvise]") != std::string::npos;
}

HugePageBuffer::HugePageBuffer(size_t bytes, Commit commit) : size_(bytes) {
  if (bytes == 0) return;
  // Whole 4 KB pages, not whole huge pages: the kernel only puts a huge page where the mapping
  // covers all of its 2 MB, so the ragged tail stays in small pages instead of holding up to
  // 2 MB more per buffer (~100 MB over a 0.5B model's 168 matrices).
  const size_t page = (size_t)::sysconf(_SC_PAGESIZE);
  length_ = (bytes + page - 1) / page * page;
  // mmap only promises 4 KB alignment: map a huge page more and unmap the ragged ends.
  const size_t over = length_ + kHugePage;
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS | (commit == Commit::OnTouch ? MAP_NORESERVE : 0);
  void* p = ::mmap(nullptr, over, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (p == MAP_FAILED) fail("cannot map {} bytes of memory: {}", bytes, std::strerror(errno));
  uint8_t* base = static_cast<uint8_t*>(p);
  uint8_t* aligned = reinterpret_cast<uint8_t*>(((uintptr_t)base + kHugePage - 1) / kHugePage * kHugePage);
  if (aligned > base) ::munmap(base, (size_t)(aligned - base));
  if (uint8_t* end = aligned + length_; end < base + over) ::munmap(end, (size_t)(base + over - end));
  ::madvise(aligned, length_, MADV_HUGEPAGE);  // advice: 4 KB pages still work where it is refused
  data_ = aligned;
}

HugePageBuffer::~HugePageBuffer() { release(); }

HugePageBuffer::HugePageBuffer(HugePageBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      length_(std::exchange(other.length_, 0)) {}

HugePageBuffer& HugePageBuffer::operator=(HugePageBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    length_ = std::exchange(other.length_, 0);
  }
  return *this;
}

void HugePageBuffer::make_read_only() {
  if (data_) ::mprotect(data_, length_, PROT_READ);
}

void HugePageBuffer::release() {
  if (data_) ::munmap(data_, length_);
  data_ = nullptr;
}

std::shared_ptr<uint8_t> allocate_streamed_bytes(size_t bytes) {
  if (bytes >= HugePageBuffer::kHugePage) {
    auto buf = std::make_shared<HugePageBuffer>(bytes);
    return std::shared_ptr<uint8_t>(buf, buf->data());
  }
  std::shared_ptr<uint8_t[]> heap(new uint8_t[bytes]());
  return std::shared_ptr<uint8_t>(heap, heap.get());
}

}  // namespace kvad
