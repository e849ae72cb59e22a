#include "io/hashing.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace kvad {

struct Hasher::Impl {
  EVP_MD_CTX* ctx = nullptr;
};

Hasher::Hasher(Kind kind) : kind_(kind), impl_(std::make_unique<Impl>()) {
  impl_->ctx = EVP_MD_CTX_new();
  if (!impl_->ctx) throw std::bad_alloc();
  reset();
}

Hasher::~Hasher() { EVP_MD_CTX_free(impl_->ctx); }

void Hasher::reset() {
  if (EVP_DigestInit_ex(impl_->ctx, kind_ == Kind::Sha256 ? EVP_sha256() : EVP_sha1(), nullptr) != 1)
    fail("libcrypto: cannot initialise {}", kind_ == Kind::Sha256 ? "SHA-256" : "SHA-1");
}

void Hasher::update(const void* data, size_t n) {
  if (n && EVP_DigestUpdate(impl_->ctx, data, n) != 1) fail("libcrypto: digest update failed");
}

std::string Hasher::hex_digest() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(impl_->ctx, md, &len) != 1) fail("libcrypto: digest final failed");
  static const char* digits = "0123456789abcdef";
  std::string out(len * 2, '0');
  for (unsigned i = 0; i < len; i++) {
    out[2 * i] = digits[md[i] >> 4];
    out[2 * i + 1] = digits[md[i] & 15];
  }
  reset();
  return out;
}

std::string sha256_hex(std::string_view bytes) {
  Hasher h(Hasher::Kind::Sha256);
  h.update(bytes);
  return h.hex_digest();
}

std::string git_blob_header(uint64_t size) {
  std::string s = "blob " + std::to_string(size);
  s.push_back('\0');
  return s;
}

std::string git_blob_sha1_hex(std::string_view bytes) {
  Hasher h(Hasher::Kind::Sha1);
  h.update(git_blob_header(bytes.size()));
  h.update(bytes);
  return h.hex_digest();
}

void hash_file_into(Hasher& h, const std::string& path, uint64_t limit) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  std::vector<char> buf(1 << 20);
  uint64_t done = 0;
  while (done < limit) {
    size_t want = (size_t)std::min<uint64_t>(buf.size(), limit - done);
    ssize_t n = ::read(fd, buf.data(), want);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      fail("{}: read failed: {}", path, std::strerror(e));
    }
    if (n == 0) break;
    h.update(buf.data(), (size_t)n);
    done += (uint64_t)n;
  }
  ::close(fd);
}

bool is_hex(std::string_view s, size_t len) {
  if (s.size() != len) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

}  // namespace kvad
