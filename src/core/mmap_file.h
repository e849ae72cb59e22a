// A read-only memory map of a whole file. Checkpoints are read through this: the OS pages weights
// in on demand and shares them between processes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/huge_pages.h"

namespace kvad {

// How a file's bytes are held. Mapped: the file's own pages (4 KB: file mappings get no huge
// pages), shared with other processes, paged in on demand. HugePages: read once into anonymous
// memory advised for transparent huge pages (2 MB), for bytes that a decode step streams whole
// every token: a q4 decode of Qwen2.5-0.5B from the .nq cache ran 1.00-1.29x faster that way
// (median 1.13x; docs/kernels.md, "Weights in huge pages"). Falls back to Mapped when huge pages are off or the
// file is over half the memory available, so a model larger than RAM still runs from the page cache.
enum class Paging { Mapped, HugePages };

class MappedFile {
 public:
  explicit MappedFile(const std::string& path, Paging paging = Paging::Mapped);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // The bytes are an anonymous copy in huge pages (Paging::HugePages took effect).
  bool in_huge_pages() const { return copy_.data() != nullptr; }
  // [p, p + n) lies in this file's mapping (never true of a copy in huge pages): what
  // release_mapped_pages may be called on.
  bool maps(const void* p, size_t n) const;

 private:
  bool read_into_huge_pages(int fd);
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  void* mapping_ = nullptr;  // the file mapping (Mapped), or
  HugePageBuffer copy_;      // the copy in huge pages
};

// Drops the whole pages inside [p, p + n) of a read-only file mapping from this process's resident
// memory once their bytes were copied: they stay in the page cache, and a later read maps them
// back. A model converted at load (an image model's reordered convolutions, a quantised copy)
// would otherwise count twice in memory, the file and the copy, until the mapping is closed. Only
// for memory a MappedFile maps: on anonymous memory it would zero the pages.
void release_mapped_pages(const void* p, size_t n);

}  // namespace kvad
