// Each SIMD kernel against the scalar reference, on random shapes including ragged tails.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <vector>

#include "core/cpu.h"
#include "core/dtype.h"
#include "core/rng.h"
#include "core/threads.h"
#include "kernels/attention.h"
#include "kernels/latent_attention.h"
#include "kernels/matmul.h"
#include "random_values.h"

using namespace kvad;
using test::randn;
using namespace kvad::kernels;

namespace {

std::vector<Isa> available_isas() {
  std::vector<Isa> out;
  if (best_isa() >= Isa::Avx2) out.push_back(Isa::Avx2);
  if (best_isa() >= Isa::Avx512) out.push_back(Isa::Avx512);
  return out;
}

}  // namespace

TEST(Matmul, SimdMatchesScalarOnRaggedShapes) {
  if (available_isas().empty()) GTEST_SKIP() << "no SIMD ISA on this CPU";
  Rng rng(42);
  const int64_t shapes[][3] = {{1, 1, 1},   {1, 7, 3},    {3, 17, 5},   {4, 16, 4},  {5, 33, 9},
                               {1, 64, 64}, {7, 100, 37}, {9, 896, 70}, {13, 130, 129}, {2, 4864, 24},
                               {6, 40, 33}, {10, 64, 8}};  // 6, 10: the last two tokens in one pass
  for (auto& s : shapes) {
    int64_t n = s[0], k = s[1], m = s[2];
    std::vector<float> x = randn(rng, (size_t)(n * k)), w = randn(rng, (size_t)(m * k));
    std::vector<uint16_t> wb(w.size());
    for (size_t i = 0; i < w.size(); i++) wb[i] = f32_to_bf16(w[i]);
    for (WType wt : {WType::F32, WType::BF16}) {
      const void* wp = wt == WType::F32 ? (const void*)w.data() : (const void*)wb.data();
      std::vector<float> ref((size_t)(n * m)), got((size_t)(n * m));
      matmul(x.data(), n, k, wp, wt, m, ref.data(), Isa::Scalar);
      for (Isa isa : available_isas()) {
        std::fill(got.begin(), got.end(), NAN);
        matmul(x.data(), n, k, wp, wt, m, got.data(), isa);
        for (size_t i = 0; i < got.size(); i++)
          ASSERT_NEAR(got[i], ref[i], 1e-4 * std::sqrt((double)k) + 1e-5 * std::fabs(ref[i]))
              << "n=" << n << " k=" << k << " m=" << m << " isa=" << isa_name(isa) << " i=" << i;
      }
    }
  }
}

TEST(Matmul, ScalarIsADotProduct) {
  // The reference itself, against a float64 dot product.
  Rng rng(7);
  int64_t n = 3, k = 37, m = 5;
  std::vector<float> x = randn(rng, (size_t)(n * k)), w = randn(rng, (size_t)(m * k)), y((size_t)(n * m));
  matmul(x.data(), n, k, w.data(), WType::F32, m, y.data(), Isa::Scalar);
  for (int64_t t = 0; t < n; t++)
    for (int64_t r = 0; r < m; r++) {
      double s = 0;
      for (int64_t i = 0; i < k; i++) s += (double)x[(size_t)(t * k + i)] * w[(size_t)(r * k + i)];
      EXPECT_NEAR(y[(size_t)(t * m + r)], s, 1e-4);
    }
}

TEST(Matmul, ThreadedEqualsSingleThreaded) {
  Rng rng(3);
  int64_t n = 5, k = 300, m = 1000;
  std::vector<float> x = randn(rng, (size_t)(n * k)), w = randn(rng, (size_t)(m * k)), a((size_t)(n * m)), b(a.size());
  set_threads(1);
  matmul(x.data(), n, k, w.data(), WType::F32, m, a.data());
  set_threads(2);
  matmul(x.data(), n, k, w.data(), WType::F32, m, b.data());
  EXPECT_EQ(a, b);  // rows are split between threads, never the sum inside a row
}

// What a cache of type t gives back for a row of head_dim values, written from the format's
// definition (bf16: nearest even with 8 significant bits; q8: int8 of x * 127/amax and a float
// scale amax/127), not by calling the cache's code.
std::vector<float> kv_round_trip(const float* x, int hd, KvType t) {
  std::vector<float> r(x, x + hd);
  if (t == KvType::BF16)
    for (float& v : r) {
      int e;
      double m = std::frexp((double)v, &e);
      v = (float)std::ldexp(std::nearbyint(std::ldexp(m, 8)), e - 8);
    }
  if (t == KvType::Q8) {
    float amax = 0;
    for (float v : r) amax = std::max(amax, std::fabs(v));
    for (float& v : r) v = amax == 0 ? 0.0f : (amax / 127.0f) * (float)std::lrintf(v * (127.0f / amax));
  }
  return r;
}

class Attention : public ::testing::TestWithParam<KvType> {};

// One call over several sequences of one batch, each at its own positions, its keys and values
// stored through kv_store into blocks of 5 positions taken in shuffled order from one pool: few
// queries take the decode path (dot products per key), many the prefill path (chunked matrix
// products), every block boundary case is crossed; all against a float64 reference over the
// values the cache type keeps. `latent`: K-only pages whose rows are also the values (their first
// s.value_dim columns), as multi-head latent attention stores them. `block_major`: the pages as the
// engine's memory lays them out, each block holding K, V and other layers' rows (bytes no call
// may read: NaN), so the kernels must step from block to block by KvPages::block_stride.
static void check_paged_attention(KvType type, AttentionShape s, bool latent,
                                  std::vector<std::array<int64_t, 2>> cases = {{3, 4}, {5, 40}, {0, 70}, {90, 3},
                                                                               {0, 1}, {9, 1}, {14, 2}},
                                  int64_t bs = 5, bool block_major = false) {
  Rng rng(5);
  const int64_t kvw = s.n_kv_heads * s.head_dim, qw = s.n_heads * s.head_dim, ow = s.n_heads * s.v_dim();
  const int64_t n_seqs = (int64_t)cases.size();  // {pos0, n} per sequence
  int64_t pool_blocks = 0, rows = 0;
  for (auto& c : cases) pool_blocks += (c[0] + c[1] + bs - 1) / bs, rows += c[1];
  std::vector<int32_t> perm((size_t)pool_blocks);
  for (int64_t i = 0; i < pool_blocks; i++) perm[(size_t)i] = (int32_t)i;
  for (int64_t i = pool_blocks - 1; i > 0; i--) std::swap(perm[(size_t)i], perm[(size_t)rng.below((uint64_t)i + 1)]);
  const int64_t row_bytes = kv_row_bytes(type, s.head_dim);
  std::vector<uint8_t> kpool((size_t)(pool_blocks * s.n_kv_heads * bs * row_bytes)), vpool(latent ? 0 : kpool.size());
  KvPages pages{kpool.data(), latent ? kpool.data() : vpool.data(), bs, type};
  const int64_t side = s.n_kv_heads * bs * row_bytes, stride = 2 * side + 192;  // 64 B of another layer, K, 128 B, V
  std::vector<uint8_t> blocks(block_major ? (size_t)(pool_blocks * stride) : 0, 0xFF);
  if (block_major) pages = {blocks.data() + 64, latent ? blocks.data() + 64 : blocks.data() + 192 + side, bs, type, stride};
  std::vector<AttentionSpan> spans;
  std::vector<std::vector<float>> keys, vals;  // per sequence: [len, kvw]
  std::vector<float> q = randn(rng, (size_t)(rows * qw));
  int64_t used = 0, row = 0;
  for (auto& c : cases) {
    int64_t len = c[0] + c[1];
    AttentionSpan sp{row, c[1], c[0], perm.data() + used};
    used += (len + bs - 1) / bs;
    keys.push_back(randn(rng, (size_t)(len * kvw)));
    vals.push_back(latent ? std::vector<float>() : randn(rng, (size_t)(len * kvw)));
    // Positions 0..len-1 stored as one span of rows (what earlier steps and this one wrote).
    AttentionSpan all{0, len, 0, sp.blocks};
    kv_store(keys.back().data(), kvw, latent ? nullptr : vals.back().data(), kvw, &all, 1, s.n_kv_heads, s.head_dim,
             pages);
    for (std::vector<float>* side : {&keys.back(), &vals.back()})  // the reference sees what the cache keeps
      for (int64_t j = 0; j < (int64_t)side->size() / s.head_dim; j++) {
        std::vector<float> r = kv_round_trip(side->data() + j * s.head_dim, s.head_dim, type);
        std::copy(r.begin(), r.end(), side->data() + j * s.head_dim);
      }
    if (latent) vals.back() = keys.back();  // the values are the stored rows
    spans.push_back(sp);
    row += c[1];
  }
  std::vector<double> ref((size_t)(rows * ow));
  int G = s.n_heads / s.n_kv_heads;
  for (int64_t i = 0; i < n_seqs; i++) {
    const AttentionSpan& sp = spans[(size_t)i];
    const std::vector<float>&k = keys[(size_t)i], &v = vals[(size_t)i];
    for (int64_t t = 0; t < sp.n; t++)
      for (int h = 0; h < s.n_heads; h++) {
        int kh = h / G;
        std::vector<double> p;
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j <= sp.pos0 + t; j++) {
          double d = 0;
          for (int x = 0; x < s.head_dim; x++)
            d += (double)q[(size_t)((sp.row0 + t) * qw + h * s.head_dim + x)] * k[(size_t)(j * kvw + kh * s.head_dim + x)];
          p.push_back(d * s.scale);
          mx = std::max(mx, p.back());
        }
        for (double& x : p) sum += (x = std::exp(x - mx));
        for (int x = 0; x < s.v_dim(); x++) {
          double o = 0;
          for (size_t j = 0; j < p.size(); j++) o += p[j] / sum * v[j * (size_t)kvw + (size_t)(kh * s.head_dim + x)];
          ref[(size_t)((sp.row0 + t) * ow + h * s.v_dim() + x)] = o;
        }
      }
  }
  std::vector<Isa> isas = available_isas();
  isas.push_back(Isa::Scalar);
  for (Isa isa : isas) {
    std::vector<float> got(ref.size(), NAN);
    attention_paged(q.data(), qw, spans.data(), n_seqs, s, pages, got.data(), ow, isa);
    for (size_t i = 0; i < got.size(); i++) ASSERT_NEAR(got[i], ref[i], 2e-5) << isa_name(isa) << " " << kv_type_name(type) << " i=" << i;
  }
}

TEST_P(Attention, PagedBatchOnEveryIsaMatchesACausalFloat64Reference) {
  check_paged_attention(GetParam(), AttentionShape{6, 2, 20, 1.0f / std::sqrt(20.0f)}, false);
}

// Qwen2.5-0.5B's heads (14 query heads on 2 KV heads of 64) in the engine's blocks of 16: decode
// rows whose keys fill whole SIMD tiles and end in a short one, and a 64-wide value row that the
// accumulation holds in registers.
TEST_P(Attention, DecodeRowsAtARealModelsShapeMatchFloat64) {
  check_paged_attention(GetParam(), AttentionShape{14, 2, 64, 0.125f}, false, {{0, 1}, {15, 1}, {16, 1}, {300, 1}, {47, 2}},
                        16);
  for (int heads : {4, 8, 12})  // one, two and three query heads a KV head (gpt2 and the tiny presets)
    check_paged_attention(GetParam(), AttentionShape{heads, 4, 16, 0.25f}, false, {{0, 1}, {15, 1}, {16, 1}, {40, 1}, {3, 6}},
                          16);
}

// Qwen3's heads (2 query heads a KV head, 128 wide; 2 KV heads here, not its 8, which only
// repeat the work: the float64 reference was 16 s of the sanitizer pass) over a prompt of 300:
// five chunks of 64 queries per KV head, so a thread's chunks go on from the keys it gathered for
// the last one, and the values' product runs deeper than one of the packed GEMM's k blocks (256);
// with a prefix (a second turn) beside it in the batch.
// The engine's memory keeps each block's layers together (backend/memory.h): the same decode rows
// and prefill chunks over such pages, where the layer's next block is a whole block of every layer
// further on.
TEST_P(Attention, BlockMajorPagesAreReadAndWrittenWhereTheyLie) {
  check_paged_attention(GetParam(), AttentionShape{14, 2, 64, 0.125f}, false, {{0, 1}, {16, 1}, {47, 2}, {5, 40}}, 16, true);
  AttentionShape latent{6, 1, 20, 0.3f};
  latent.value_dim = 12;
  check_paged_attention(GetParam(), latent, true, {{3, 4}, {37, 1}}, 5, true);
}

TEST_P(Attention, PrefillAtARealModelsShapeMatchesFloat64) {
  check_paged_attention(GetParam(), AttentionShape{4, 2, 128, 1.0f / std::sqrt(128.0f)}, false, {{0, 300}, {37, 70}}, 16);
}

TEST_P(Attention, LatentPagesServeAsKeysAndTheirFirstColumnsAsValues) {
  // MLA's shape: every query head on one KV head whose 20-wide rows are [12 latent | 8 rope key],
  // the values the latent alone. 6 query heads take both paths; 24 make every span a matrix
  // product, in chunks shorter than 64 queries.
  for (int heads : {6, 24}) {
    AttentionShape s{heads, 1, 20, 0.3f};
    s.value_dim = 12;
    check_paged_attention(GetParam(), s, true);
    // One decode row alone: its 24 heads are split over the threads in parts of at least 4.
    check_paged_attention(GetParam(), s, true, {{37, 1}});
  }
}

INSTANTIATE_TEST_SUITE_P(KvTypes, Attention, ::testing::Values(KvType::F32, KvType::BF16, KvType::Q8),
                         [](const auto& info) { return std::string(kv_type_name(info.param)); });

TEST(LatentAttention, AbsorbAndExpandOnEveryIsaMatchFloat64) {
  // 3 heads, nope 5, rope 4, kv_rank 19 (no multiple of a vector), v 6; rows with padded strides:
  // 7 (a row at a time) and 40 (a prefill's: one packed product per head).
  for (const int64_t n : {7, 40}) {
    SCOPED_TRACE(n);
    const LatentShape s{3, 5, 4, 19, 6, 0.5f};
    const int64_t qs = s.n_heads * s.query_width() + 3, us = s.n_heads * s.kv_rank + 1;
    Rng rng(9);
    std::vector<float> kv_b = randn(rng, (size_t)(s.n_heads * (s.nope_dim + s.v_dim) * s.kv_rank)),
                       q = randn(rng, (size_t)(n * qs)), u = randn(rng, (size_t)(n * us));
    auto w = [&](int h, int row, int c) { return (double)kv_b[(size_t)(((h * (s.nope_dim + s.v_dim)) + row) * s.kv_rank + c)]; };
    std::vector<Isa> isas = available_isas();
    isas.push_back(Isa::Scalar);
    for (Isa isa : isas) {
      const int64_t lw = s.n_heads * s.latent_width(), ow = s.n_heads * s.v_dim;
      std::vector<float> qa((size_t)(n * lw), NAN), out((size_t)(n * ow), NAN);
      absorb_queries(q.data(), qs, n, s, kv_b.data(), qa.data(), lw, isa);
      expand_values(u.data(), us, n, s, kv_b.data(), out.data(), ow, isa);
      for (int64_t t = 0; t < n; t++)
        for (int h = 0; h < s.n_heads; h++) {
          const float* qh = q.data() + t * qs + h * s.query_width();
          for (int c = 0; c < s.kv_rank; c++) {  // q_nope through W_UK_h: kv_b's first nope rows of the head
            double ref = 0;
            for (int d = 0; d < s.nope_dim; d++) ref += qh[d] * w(h, d, c);
            ASSERT_NEAR(qa[(size_t)(t * lw + h * s.latent_width() + c)], ref, 1e-5) << isa_name(isa);
          }
          for (int d = 0; d < s.rope_dim; d++)  // q_pe passes through
            ASSERT_EQ(qa[(size_t)(t * lw + h * s.latent_width() + s.kv_rank + d)], qh[s.nope_dim + d]);
          for (int e = 0; e < s.v_dim; e++) {  // the weighted latent through W_UV_h: the next v rows
            double ref = 0;
            for (int c = 0; c < s.kv_rank; c++) ref += u[(size_t)(t * us + h * s.kv_rank + c)] * w(h, s.nope_dim + e, c);
            ASSERT_NEAR(out[(size_t)(t * ow + h * s.v_dim + e)], ref, 1e-5) << isa_name(isa);
          }
        }
    }
  }
}

TEST(AttentionKvType, BytesPerPositionAreWhatEachTypeStores) {
  // Qwen2.5-0.5B's head: 64 values. f32 4 bytes each, bf16 2, q8 1 plus a 4-byte scale.
  EXPECT_EQ(kv_row_bytes(KvType::F32, 64), 256);
  EXPECT_EQ(kv_row_bytes(KvType::BF16, 64), 128);
  EXPECT_EQ(kv_row_bytes(KvType::Q8, 64), 68);
  EXPECT_EQ(parse_kv_type("q8"), KvType::Q8);
  EXPECT_THROW(parse_kv_type("q4"), std::exception);
}

// matmul_nn (x [n, k] times B [k, m], m contiguous: attention scores against transposed keys)
// against a float64 sum, for every instruction set the CPU has, ragged in all three sizes.
TEST(Matmul, NnMatchesTheSumInDouble) {
  Rng rng(5);
  const int64_t shapes[][3] = {{1, 1, 1},    {3, 40, 100}, {5, 7, 64},   {4, 160, 4099},
                               {33, 64, 17}, {9, 3, 130},  {13, 4099, 40}, {25, 77, 20}};
  std::vector<Isa> isas = {Isa::Scalar};
  for (Isa i : available_isas()) isas.push_back(i);
  for (auto& s : shapes) {
    const int64_t n = s[0], k = s[1], m = s[2];
    std::vector<float> x = randn(rng, (size_t)(n * k)), b = randn(rng, (size_t)(k * m)), y((size_t)(n * m));
    for (Isa isa : isas) {
      std::fill(y.begin(), y.end(), NAN);
      matmul_nn(x.data(), n, k, b.data(), m, y.data(), isa);
      for (int64_t t = 0; t < n; t++)
        for (int64_t j = 0; j < m; j++) {
          double r = 0;
          for (int64_t i = 0; i < k; i++) r += (double)x[(size_t)(t * k + i)] * b[(size_t)(i * m + j)];
          ASSERT_NEAR(y[(size_t)(t * m + j)], r, 2e-6 * std::sqrt((double)k) * 4)
              << "n=" << n << " k=" << k << " m=" << m << " isa=" << isa_name(isa) << " at " << t << "," << j;
        }
    }
  }
}
