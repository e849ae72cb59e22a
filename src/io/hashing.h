// Content hashes the Hub names files by: SHA-256 for Git LFS files, Git's blob SHA-1 for the rest.
// Streaming (update in pieces) so a multi-GB download is hashed as it arrives. OpenSSL's libcrypto
// does the work (SHA-NI / AVX2 code paths, ~2 GB/s).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace kvad {

class Hasher {
 public:
  enum class Kind { Sha256, Sha1 };
  explicit Hasher(Kind kind);
  ~Hasher();
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;
  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  // Lower-case hex digest; the hasher is reset afterwards.
  std::string hex_digest();
  void reset();

 private:
  Kind kind_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

std::string sha256_hex(std::string_view bytes);
// Git's object id of a blob: sha1("blob <size>\0" + bytes), what the Hub reports for non-LFS files.
std::string git_blob_sha1_hex(std::string_view bytes);
// The header Git hashes before a blob's bytes (for streaming: update(header) then the bytes).
std::string git_blob_header(uint64_t size);
// Hashes a file on disk (first `limit` bytes; all when limit is UINT64_MAX).
void hash_file_into(Hasher& h, const std::string& path, uint64_t limit = UINT64_MAX);

bool is_hex(std::string_view s, size_t len);  // exactly len lower-case hex digits

}  // namespace kvad
