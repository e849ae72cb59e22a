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

}  // namespace kvad
