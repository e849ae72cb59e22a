#include "core/fs.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>  // renameat2
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace kvad {

std::string read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    ::close(fd);
    fail("{}: cannot read (is it a directory?)", path);
  }
  // Straight into the string, sized once from the file's size (+1 to see the end without growing):
  // appending 64 KiB at a time copied a 9 MB tokenizer.json about three times over.
  std::string out(S_ISREG(st.st_mode) && st.st_size > 0 ? (size_t)st.st_size + 1 : size_t{1} << 16, '\0');
  size_t used = 0;
  for (;;) {
    if (used == out.size()) out.resize(2 * out.size());  // a file that grew, or one without a size (/proc)
    ssize_t n = ::read(fd, out.data() + used, out.size() - used);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      fail("{}: read failed: {}", path, std::strerror(e));
    }
    if (n == 0) break;
    used += (size_t)n;
  }
  ::close(fd);
  out.resize(used);
  return out;
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

size_t remove_stale_temp_files(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p(path);
  fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  std::string prefix = p.filename().string() + ".tmp.";
  size_t removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    std::string pid_text = name.substr(prefix.size());
    if (pid_text.size() > 10 || pid_text.find_first_not_of("0123456789") != std::string::npos) continue;
    long pid = std::stol(pid_text);
    if (pid <= 0 || pid == (long)::getpid()) continue;
    if (::kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge)
    std::error_code rm;
    if (fs::remove(it->path(), rm)) removed++;
  }
  return removed;
}

void fsync_directory(const std::string& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

AtomicFile::AtomicFile(const std::string& path) : path_(path), tmp_(path + ".tmp." + std::to_string(::getpid())) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("{}: cannot create: {}", tmp_, std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void AtomicFile::write(std::string_view bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::write(fd_, bytes.data() + off, bytes.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("{}: write failed: {}", tmp_, std::strerror(errno));
    }
    off += (size_t)n;
  }
}

void AtomicFile::commit() {
  int fd = fd_;
  fd_ = -1;
  if (::fsync(fd) != 0) {
    int e = errno;
    ::close(fd);
    ::unlink(tmp_.c_str());
    fail("{}: fsync failed: {}", tmp_, std::strerror(e));
  }
  if (::close(fd) != 0 || ::rename(tmp_.c_str(), path_.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp_.c_str());
    fail("{}: cannot move into place: {}", path_, std::strerror(e));
  }
  fsync_directory(std::filesystem::path(path_).parent_path().string());
}

void atomic_write_file(const std::string& path, std::string_view bytes) {
  AtomicFile f(path);
  f.write(bytes);
  f.commit();
}

void write_directory_atomically(const std::string& dir, const std::function<void(const std::string& tmp)>& fill) {
  namespace fs = std::filesystem;
  const fs::path p(dir);
  const std::string tmp = (p.parent_path() / ("." + p.filename().string() + ".tmp-" + std::to_string(::getpid()))).string();
  std::error_code ec;
  fs::remove_all(tmp, ec);
  try {
    make_directories(tmp);
    fill(tmp);
    fsync_directory(tmp);
    if (is_directory(dir)) {
      if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) != 0)
        fail("cannot replace {}: {}", dir, std::strerror(errno));
      fs::remove_all(tmp, ec);  // now the old folder
    } else if (::rename(tmp.c_str(), dir.c_str()) != 0) {
      fail("cannot create {}: {}", dir, std::strerror(errno));
    }
    fsync_directory(p.parent_path().string());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

void make_directories(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) fail("{}: cannot create directory: {}", path, ec.message());
}

std::string join_path(const std::string& a, const std::string& b) {
  return (std::filesystem::path(a) / b).string();
}

Json file_stamps(const std::vector<std::string>& paths) {
  Json files = Json::array();
  for (const std::string& f : paths) {
    struct stat st {};
    ::stat(f.c_str(), &st);
    files.push_back({{"name", std::filesystem::path(f).filename().string()},
                     {"size", (uint64_t)st.st_size},
                     {"mtime_ns", (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec}});
  }
  return files;
}

}  // namespace kvad
