#include "kernels/attention.h"

#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/attention_impl.h"

namespace kvad::kernels {

void attention_avx512(const float*, int64_t, const AttentionSpan*, int64_t, const AttentionShape&, const KvPages&,
                      float*, int64_t);
void attention_avx2(const float*, int64_t, const AttentionSpan*, int64_t, const AttentionShape&, const KvPages&,
                    float*, int64_t);

namespace {
struct ScalarVec {
  using reg = float;
  static constexpr int W = 1;
  static constexpr int kDimHeads = 4;
  static constexpr bool kPanels = false;  // gemm_nn: gemm.h has AVX-512 tiles only
  static reg zero() { return 0.0f; }
  static reg set1(float x) { return x; }
  static reg load(const float* p, int64_t) { return *p; }
  static void store(float* p, reg v, int64_t) { *p = v; }
  static reg fmadd(reg a, reg b, reg c) { return a * b + c; }
  static reg load(const uint16_t* bf16, int64_t) { return bf16_to_f32(*bf16); }
  static reg load(const int8_t* q, int64_t) { return (float)*q; }
  static reg add(reg a, reg b) { return a + b; }
  static reg mul(reg a, reg b) { return a * b; }
  static void softmax(float* x, int64_t n, float scale) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += (x[i] = std::exp((x[i] - mx) * scale));
    for (int64_t i = 0; i < n; i++) x[i] /= s;
  }
  static void row_sums(const float* a, float* out) { out[0] = a[0]; }
  static float dot(const float* a, const float* b, int n) {
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
      s0 += a[i] * b[i];
      s1 += a[i + 1] * b[i + 1];
      s2 += a[i + 2] * b[i + 2];
      s3 += a[i + 3] * b[i + 3];
    }
    for (; i < n; i++) s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
  }
  static void axpy(float* y, float a, const float* x, int n) {
    for (int i = 0; i < n; i++) y[i] += a * x[i];
  }
  static void widen_bf16(const uint16_t* s, float* d, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] = bf16_to_f32(s[i]);
  }
  static void dequant_q8(const int8_t* q, float scale, float* d, int n) {
    for (int i = 0; i < n; i++) d[i] = scale * (float)q[i];
  }
};
}  // namespace

void attention_paged(const float* q, int64_t q_stride, const AttentionSpan* spans, int64_t n_spans,
                     const AttentionShape& s, const KvPages& kv, float* out, int64_t out_stride, Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::Avx512) return attention_avx512(q, q_stride, spans, n_spans, s, kv, out, out_stride);
  if (isa == Isa::Avx2) return attention_avx2(q, q_stride, spans, n_spans, s, kv, out, out_stride);
#endif
  detail::attention_paged_impl<ScalarVec>(q, q_stride, spans, n_spans, s, kv, out, out_stride);
}

const char* kv_type_name(KvType t) {
  switch (t) {
    case KvType::F32: return "f32";
    case KvType::BF16: return "bf16";
    case KvType::Q8: return "q8";
  }
  return "?";
}

KvType parse_kv_type(const std::string& name) {
  for (KvType t : {KvType::F32, KvType::BF16, KvType::Q8})
    if (name == kv_type_name(t)) return t;
  fail("unknown KV cache type '{}': use f32, bf16 or q8", name.substr(0, 32));
}

int64_t kv_row_bytes(KvType t, int64_t head_dim) {
  switch (t) {
    case KvType::F32: return head_dim * 4;
    case KvType::BF16: return head_dim * 2;
    case KvType::Q8: return head_dim + 4;
  }
  return 0;
}

namespace {
// One position of one head in the cache's type: element d at elements[d * stride] (a row: stride
// 1; keys by dimension: the block size), q8's scale at `scale`.
void store_position(const float* x, int hd, KvType type, uint8_t* elements, int64_t stride, uint8_t* scale) {
  switch (type) {
    case KvType::F32: {
      float* f = reinterpret_cast<float*>(elements);
      for (int d = 0; d < hd; d++) f[d * stride] = x[d];
      return;
    }
    case KvType::BF16: {
      uint16_t* b = reinterpret_cast<uint16_t*>(elements);
      for (int d = 0; d < hd; d++) b[d * stride] = f32_to_bf16(x[d]);
      return;
    }
    case KvType::Q8: {
      float amax = 0;
      for (int d = 0; d < hd; d++) amax = std::max(amax, std::fabs(x[d]));
      float s = amax / 127.0f, inv = amax > 0 ? 127.0f / amax : 0.0f;
      int8_t* q = reinterpret_cast<int8_t*>(elements);
      for (int d = 0; d < hd; d++) q[d * stride] = (int8_t)std::lrintf(std::clamp(x[d] * inv, -127.0f, 127.0f));
      std::memcpy(scale, &s, sizeof s);
      return;
    }
  }
}

int64_t element_bytes(KvType t) { return t == KvType::F32 ? 4 : t == KvType::BF16 ? 2 : 1; }
}  // namespace

void kv_store(const float* k, int64_t k_stride, const float* v, int64_t v_stride, const AttentionSpan* spans,
              int64_t n_spans, int n_kv_heads, int head_dim, const KvPages& kv) {
  const int64_t bs = kv.block_size, rb = kv_row_bytes(kv.type, head_dim), eb = element_bytes(kv.type);
  const bool by_dim = kv.keys_by_dimension();
  for (int64_t i = 0; i < n_spans; i++) {
    const AttentionSpan& sp = spans[i];
    for (int64_t t = 0; t < sp.n; t++) {
      int64_t p = sp.pos0 + t, r = sp.row0 + t, j = p % bs;
      for (int h = 0; h < n_kv_heads; h++) {
        const int64_t block = sp.blocks[p / bs];
        uint8_t* keys = kv_block_rows(kv.k, kv, block, h, n_kv_heads, rb);
        const float* key = k + r * k_stride + h * head_dim;
        if (by_dim)  // [head_dim][bs] elements, then bs scales
          store_position(key, head_dim, kv.type, keys + j * eb, bs, keys + head_dim * bs + j * 4);
        else
          store_position(key, head_dim, kv.type, keys + j * rb, 1, keys + j * rb + head_dim);
        if (v) {
          uint8_t* row = kv_block_rows(kv.v, kv, block, h, n_kv_heads, rb) + j * rb;
          store_position(v + r * v_stride + h * head_dim, head_dim, kv.type, row, 1, row + head_dim);
        }
      }
    }
  }
}

}  // namespace kvad::kernels
