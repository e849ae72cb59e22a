#include "kernels/stream.h"

#include <cstring>
#include <vector>

#include "core/threads.h"

namespace kvad::kernels {

uint64_t stream_read(const uint8_t* p, size_t n, Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::Avx512) return stream_read_avx512(p, n);
  if (isa == Isa::Avx2) return stream_read_avx2(p, n);
#endif
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (size_t i = 0; i + 32 <= n; i += 32) {
    uint64_t v[4];
    std::memcpy(v, p + i, 32);
    s0 += v[0], s1 += v[1], s2 += v[2], s3 += v[3];
  }
  return s0 + s1 + s2 + s3;
}

uint64_t stream_read_threads(const uint8_t* p, size_t n, Isa isa) {
  std::vector<uint64_t> sums((size_t)pool().size());
  pool().run([&](int t, int nt) {
    size_t b = n * (size_t)t / (size_t)nt / 256 * 256, e = n * (size_t)(t + 1) / (size_t)nt / 256 * 256;
    sums[(size_t)t] = stream_read(p + b, e - b, isa);
  });
  uint64_t sum = 0;
  for (uint64_t x : sums) sum += x;
  return sum;
}

}  // namespace kvad::kernels
