#include "io/download.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "core/fs.h"
#include "io/hashing.h"
#include "io/http.h"

namespace kvad {

std::string format_bytes(uint64_t n) {
  if (n < 1000) return fmt::format("{} B", n);
  if (n < 1000 * 1000) return fmt::format("{:.1f} kB", n / 1e3);
  if (n < 1000ull * 1000 * 1000) return fmt::format("{:.1f} MB", n / 1e6);
  return fmt::format("{:.2f} GB", n / 1e9);
}

void check_free_space(const std::string& dir, uint64_t need, const std::string& what) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return;  // cannot tell: the write itself will report ENOSPC
  uint64_t free_bytes = (uint64_t)st.f_bavail * (uint64_t)st.f_frsize;
  if (free_bytes < need)
    fail("{}: not enough disk space in {}: needs {} more, {} free (free some space, or set HF_HUB_CACHE / HF_HOME "
         "to a larger disk)",
         what, dir, format_bytes(need), format_bytes(free_bytes));
}

namespace {

// The partial file: appended to, truncated on restart, fsynced and renamed when complete.
struct PartFile {
  std::string path;
  int fd = -1;
  explicit PartFile(const std::string& p) : path(p) {
    fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
      fail("{}: cannot create: {} (is the HF cache writable? set HF_HUB_CACHE or HF_HOME to a writable folder)", p,
           std::strerror(errno));
  }
  ~PartFile() {
    if (fd >= 0) ::close(fd);
  }
  uint64_t size() const {
    struct stat st {};
    if (::fstat(fd, &st) != 0) fail("{}: cannot stat: {}", path, std::strerror(errno));
    return (uint64_t)st.st_size;
  }
  void truncate() {
    if (::ftruncate(fd, 0) != 0) fail("{}: cannot truncate: {}", path, std::strerror(errno));
  }
  void write_at(const char* data, size_t n, uint64_t off) {
    while (n) {
      ssize_t w = ::pwrite(fd, data, n, (off_t)off);
      if (w < 0) {
        if (errno == EINTR) continue;
        if (errno == ENOSPC)
          fail("{}: the disk is full (the partial download is kept; free space and run the command again to resume)",
               path);
        fail("{}: write failed: {}", path, std::strerror(errno));
      }
      data += w;
      n -= (size_t)w;
      off += (uint64_t)w;
    }
  }
  void sync() {
    if (::fsync(fd) != 0) fail("{}: fsync failed: {}", path, std::strerror(errno));
  }
};

// Parses "bytes START-END/TOTAL"; returns START or -1.
int64_t content_range_start(const std::string& v) {
  if (v.rfind("bytes ", 0) != 0) return -1;
  char* end = nullptr;
  long long start = std::strtoll(v.c_str() + 6, &end, 10);
  if (end == v.c_str() + 6 || *end != '-') return -1;
  return start;
}

void wait_or_cancel(double seconds, const std::atomic<bool>* cancel) {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    if (cancel && cancel->load()) throw Cancelled("interrupted");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

uint64_t download_blob(const hf::RepoCache& rc, const BlobSource& src, const DownloadSettings& set,
                       TransferProgress* progress) {
  hf::validate_etag(src.etag, src.name);
  const std::string blob = rc.blob_path(src.etag);
  if (file_exists(blob)) return 0;
  try {
    make_directories(rc.blobs_dir());
  } catch (const Error& e) {
    fail("{} (set HF_HUB_CACHE or HF_HOME to a writable folder)", e.what());
  }
  hf::FileLock lock(rc.lock_path(src.etag), set.cancel);
  if (file_exists(blob)) return 0;  // another process finished it while we waited

  const bool lfs = src.etag.size() == 64;
  Hasher hasher(lfs ? Hasher::Kind::Sha256 : Hasher::Kind::Sha1);
  auto restart_hash = [&] {
    hasher.reset();
    if (!lfs) hasher.update(git_blob_header(src.size));
  };

  PartFile part(blob + ".incomplete");
  uint64_t have = part.size();
  if (have > src.size) {
    part.truncate();
    have = 0;
  }
  restart_hash();
  bool resumed_old_bytes = have > 0;
  if (have) hash_file_into(hasher, part.path, have);
  check_free_space(rc.blobs_dir(), src.size - have, src.name);

  if (progress) progress->file_started(src.name, src.size, have);
  uint64_t transferred = 0;
  int failures = 0;
  double wait = set.retry_wait_s;
  bool full_restart_done = false;

  try {
  for (;;) {
    while (have < src.size) {
      if (set.cancel && set.cancel->load()) throw Cancelled("interrupted");
      HttpRequest rq;
      rq.url = src.url;
      rq.headers = src.headers;
      if (have) rq.headers.push_back(fmt::format("Range: bytes={}-", have));
      rq.follow_redirects = true;
      rq.connect_timeout_s = set.connect_timeout_s;
      rq.stall_timeout_s = set.stall_timeout_s;
      rq.cancel = set.cancel;
      bool writing = false, misplaced = false;
      std::string error_body;
      long status = 0;
      rq.on_response = [&](long st, const HttpHeaders& h) {
        status = st;
        if (st == 206) {
          auto it = h.find("content-range");
          int64_t start = it == h.end() ? -1 : content_range_start(it->second);
          if (start != (int64_t)have) {
            misplaced = true;  // not where we asked: start over rather than guess
            return;
          }
          writing = true;
        } else if (st == 200) {
          if (have) {  // the server ignored the Range header: the body is the whole file
            part.truncate();
            have = 0;
            restart_hash();
            if (progress) progress->note(src.name + ": the server does not resume downloads; starting over");
          }
          writing = true;
        }
      };
      rq.on_body = [&](const char* data, size_t n) {
        if (!writing) {
          if (error_body.size() < 2048) error_body.append(data, std::min<size_t>(n, 2048));
          return;
        }
        if (have + n > src.size)
          fail("{}: the server sent more than the {} bytes the Hub announced", src.name, src.size);
        part.write_at(data, n, have);
        hasher.update(data, n);
        have += n;
        transferred += n;
        if (progress) progress->file_progress(src.name, have);
      };
      try {
        HttpResponse r = http_request(rq);
        if (misplaced || (r.status == 416 && have)) {  // the server cannot continue our partial file
          part.truncate();
          have = 0;
          restart_hash();
          if (++failures > set.retries) fail("{}: the server refuses to resume ({}), even from the start", src.name, r.status);
          continue;
        }
        if (r.status != 200 && r.status != 206) {
          std::string detail = r.header("x-error-message").value_or("");
          fail("{}: the file host answered HTTP {} for {}{}{}", src.name, r.status, src.url, detail.empty() ? "" : ": ",
               detail);
        }
        if (have < src.size) throw HttpError(HttpError::Kind::Cut, fmt::format("{}: the response ended early", src.url));
        failures = 0;
      } catch (const HttpError& e) {
        if (!e.retryable() || ++failures > set.retries) {
          const char* why = e.kind == HttpError::Kind::Timeout ? "timed out"
                            : e.kind == HttpError::Kind::Connect ? "cannot connect"
                                                                   : "failed";
          fail("{}: download {} at {} of {} after {} attempt(s): {} (the partial file is kept: run the command again to "
               "resume; HF_HUB_DOWNLOAD_TIMEOUT sets the stall timeout)",
               src.name, why, format_bytes(have), format_bytes(src.size), failures, e.what());
        }
        if (progress)
          progress->note(fmt::format("{}: connection {} at {} of {}; resuming", src.name,
                                     e.kind == HttpError::Kind::Timeout ? "stalled" : "lost", format_bytes(have),
                                     format_bytes(src.size)));
        wait_or_cancel(wait, set.cancel);
        wait = std::min(wait * 2, 4.0);
      }
    }
    part.sync();
    std::string got = hasher.hex_digest();
    if (got == src.etag) break;
    part.truncate();
    have = 0;
    restart_hash();
    if (resumed_old_bytes && !full_restart_done) {
      // The bytes kept from an earlier run may be what is wrong: one clean download from the start.
      full_restart_done = true;
      resumed_old_bytes = false;
      if (progress) progress->note(src.name + ": the resumed file did not verify; downloading it again from the start");
      continue;
    }
    ::unlink(part.path.c_str());
    fail("{}: the downloaded bytes do not match the Hub's {} (expected {}, got {}); nothing was saved. Run the "
         "command again; if it persists, something between you and the Hub is altering the file",
         src.name, lfs ? "sha256" : "git sha1", src.etag, got);
  }
  } catch (const Cancelled&) {
    throw Cancelled(fmt::format("interrupted: {} stopped at {} of {}; the partial file is kept and the same command "
                                "resumes it",
                                src.name, format_bytes(have), format_bytes(src.size)));
  }
  if (::rename(part.path.c_str(), blob.c_str()) != 0) fail("{}: cannot move into place: {}", blob, std::strerror(errno));
  fsync_directory(rc.blobs_dir());
  if (progress) progress->file_done(src.name);
  return transferred;
}

}  // namespace kvad
