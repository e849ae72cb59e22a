// One file from the Hub into the HF cache's blobs/: resumable, verified, placed atomically.
//   - bytes go to blobs/<etag>.incomplete under the blob's lock (.locks/.../<etag>.lock);
//   - an existing .incomplete is resumed with "Range: bytes=N-" (a 200 instead of 206 restarts it);
//   - a connection cut or stalled mid-file is resumed in the same run, up to `retries` times;
//   - the bytes are hashed as they arrive (the kept prefix is re-hashed on resume) and must match
//     the etag: sha256 for LFS files, git's blob sha1 for the others; a mismatch deletes the partial
//     file and places nothing;
//   - only a complete, verified file is renamed to blobs/<etag>.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "io/hf_cache.h"

namespace kvad {

// What the CLI shows while files arrive. All calls come from the downloading thread.
class TransferProgress {
 public:
  virtual ~TransferProgress() = default;
  virtual void file_started(const std::string& name, uint64_t size, uint64_t resumed_from) {}
  virtual void file_progress(const std::string& name, uint64_t have) {}
  virtual void file_done(const std::string& name) {}
  virtual void note(const std::string& message) {}
};

struct BlobSource {
  std::string url;                   // where to GET (redirects are followed)
  std::vector<std::string> headers;  // e.g. the Authorization header, only for the Hub's own host
  std::string etag;                  // the blob's name and expected hash
  uint64_t size = 0;                 // expected length
  std::string name;                  // the file's path in the repo, for messages
};

struct DownloadSettings {
  double connect_timeout_s = 10;
  double stall_timeout_s = 10;  // no byte for this long -> the attempt fails (and is resumed)
  int retries = 5;              // resumes after a cut or stalled connection, per file
  double retry_wait_s = 0.5;    // first wait between attempts (doubles, at most 4 s)
  const std::atomic<bool>* cancel = nullptr;
};

// Downloads src into rc's blobs/ unless the blob is already there. Returns the bytes transferred.
uint64_t download_blob(const hf::RepoCache& rc, const BlobSource& src, const DownloadSettings& settings,
                       TransferProgress* progress);

// Fails with a clear message when `dir`'s file system has less than `need` bytes free.
void check_free_space(const std::string& dir, uint64_t need, const std::string& what);

std::string format_bytes(uint64_t n);

}  // namespace kvad
