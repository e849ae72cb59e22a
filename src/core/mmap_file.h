// A read-only memory map of a whole file. Checkpoints are read through this: the OS pages weights
// in on demand and shares them between processes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace kvad {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Drops the whole pages inside [p, p + n) of a read-only file mapping from this process's resident
// memory once their bytes were copied: they stay in the page cache, and a later read maps them
// back. A model converted at load (an image model's reordered convolutions, a quantised copy)
// would otherwise count twice in memory, the file and the copy, until the mapping is closed. Only
// for memory a MappedFile maps: on anonymous memory it would zero the pages.
void release_mapped_pages(const void* p, size_t n);

}  // namespace kvad
