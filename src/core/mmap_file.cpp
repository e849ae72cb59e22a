#include "core/mmap_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "core/error.h"
#include "core/meminfo.h"

namespace kvad {

MappedFile::MappedFile(const std::string& path, Paging paging) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("{}: not a regular file", path);
  }
  size_ = (size_t)st.st_size;
  if (size_ > 0 && !(paging == Paging::HugePages && read_into_huge_pages(fd))) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      fail("{}: mmap failed: {}", path, std::strerror(e));
    }
    data_ = static_cast<const uint8_t*>(p);
    map_base_ = p;
    map_length_ = size_;
  }
  ::close(fd);
}

static bool huge_pages_enabled() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(f, line);
  return line.find("[always]") != std::string::npos || line.find("[madvise]") != std::string::npos;
}

// An anonymous region aligned to 2 MB, advised for huge pages, the file read into it, then made
// read-only like the mapping it stands for. False (nothing held) where that cannot be done.
bool MappedFile::read_into_huge_pages(int fd) {
  constexpr size_t kHuge = size_t{2} << 20;
  const uint64_t available = meminfo_bytes("MemAvailable");
  if (size_ < kHuge || !huge_pages_enabled() || (available && size_ > available / 2)) return false;
  const size_t length = (size_ + kHuge - 1) / kHuge * kHuge + kHuge;
  void* base = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return false;
  uint8_t* aligned = reinterpret_cast<uint8_t*>(((uintptr_t)base + kHuge - 1) / kHuge * kHuge);
  ::madvise(aligned, length - (size_t)(aligned - (uint8_t*)base), MADV_HUGEPAGE);  // advice: 4 KB pages still work
  for (size_t done = 0; done < size_;) {
    const ssize_t n = ::pread(fd, aligned + done, std::min<size_t>(size_ - done, size_t{1} << 30), (off_t)done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = n < 0 ? errno : 0;
      ::munmap(base, length);
      fail("{}: read failed at byte {} of {}: {}", path_, done, size_, e ? std::strerror(e) : "the file got shorter");
    }
    done += (size_t)n;
  }
  ::mprotect(base, length, PROT_READ);
  data_ = aligned;
  map_base_ = base;
  map_length_ = length;
  huge_ = true;
  return true;
}

void release_mapped_pages(const void* p, size_t n) {
  const uintptr_t page = (uintptr_t)::sysconf(_SC_PAGESIZE);
  const uintptr_t b = ((uintptr_t)p + page - 1) / page * page, e = ((uintptr_t)p + n) / page * page;
  if (e > b) ::madvise((void*)b, e - b, MADV_DONTNEED);  // advice: a failure only leaves the pages resident
}

MappedFile::~MappedFile() {
  if (map_base_) ::munmap(map_base_, map_length_);
}

}  // namespace kvad
