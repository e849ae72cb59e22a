#include "core/mmap_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/huge_pages.h"
#include "core/meminfo.h"

namespace kvad {

namespace {
struct FileDescriptor {
  int fd;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};
}  // namespace

MappedFile::MappedFile(const std::string& path, Paging paging) : path_(path) {
  const FileDescriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(file.fd, &st) != 0 || !S_ISREG(st.st_mode)) fail("{}: not a regular file", path);
  size_ = (size_t)st.st_size;
  if (size_ == 0 || (paging == Paging::HugePages && read_into_huge_pages(file.fd))) return;
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, file.fd, 0);
  if (p == MAP_FAILED) fail("{}: mmap failed: {}", path, std::strerror(errno));
  data_ = static_cast<const uint8_t*>(p);
  mapping_ = p;
}

// The file read into an anonymous region advised for huge pages, then made read-only like the
// mapping it stands for. False (nothing held) where that cannot be done.
bool MappedFile::read_into_huge_pages(int fd) {
  const uint64_t available = meminfo_bytes("MemAvailable");
  if (size_ < HugePageBuffer::kHugePage || !transparent_huge_pages_enabled() || (available && size_ > available / 2))
    return false;
  HugePageBuffer copy;
  try {
    copy = HugePageBuffer(size_);
  } catch (const Error&) {
    return false;  // no anonymous memory for it: the mapping still works
  }
  for (size_t done = 0; done < size_;) {
    const ssize_t n = ::pread(fd, copy.data() + done, std::min<size_t>(size_ - done, size_t{1} << 30), (off_t)done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = n < 0 ? errno : 0;
      fail("{}: read failed at byte {} of {}: {}", path_, done, size_, e ? std::strerror(e) : "the file got shorter");
    }
    done += (size_t)n;
  }
  copy.make_read_only();
  copy_ = std::move(copy);
  data_ = copy_.data();
  return true;
}

bool MappedFile::maps(const void* p, size_t n) const {
  if (!mapping_) return false;
  const uint8_t* b = static_cast<const uint8_t*>(p);
  return b >= data_ && n <= size_ && b - data_ <= (ptrdiff_t)(size_ - n);
}

void release_mapped_pages(const void* p, size_t n) {
  const uintptr_t page = (uintptr_t)::sysconf(_SC_PAGESIZE);
  const uintptr_t b = ((uintptr_t)p + page - 1) / page * page, e = ((uintptr_t)p + n) / page * page;
  if (e > b) ::madvise((void*)b, e - b, MADV_DONTNEED);  // advice: a failure only leaves the pages resident
}

MappedFile::~MappedFile() {
  if (mapping_) ::munmap(mapping_, size_);
}

}  // namespace kvad
