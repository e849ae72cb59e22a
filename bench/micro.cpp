// Kernel microbenchmarks (Google Benchmark): the matrix products at Qwen2.5-0.5B's shapes for
// every weight format and ISA, activation quantisation, attention, and the cost of an empty
// parallel region (the per-operation floor of the thread pool).
//   build/kvad_micro [--benchmark_filter=q8] [--benchmark_min_time=0.5]
// Figures are per call; "items" are multiply-accumulates (so items/s = MAC/s) or bytes.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backend/memory.h"
#include "core/cpu.h"
#include "core/dtype.h"
#include "core/huge_pages.h"
#include "core/rng.h"
#include "core/threads.h"
#include "kernels/attention.h"
#include "kernels/gemm.h"
#include "kernels/kqmatmul.h"
#include "kernels/latent_attention.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/qmatmul.h"
#include "kernels/stream.h"
#include "image/nn.h"
#include "quant/activations.h"
#include "quant/kquant.h"
#include "quant/packed.h"
#include "runtime/sampler.h"
#include "train/gemm.h"

using namespace kvad;

namespace {

std::vector<float> randn(size_t n, uint64_t seed) {
  Rng r(seed);
  std::vector<float> v(n);
  for (float& x : v) x = (float)r.normal();
  return v;
}

// args: n tokens, k inputs, m outputs, isa
// The products' isa argument: 0-2 an Isa (2: AVX-512's vector kernels alone), 3: AVX-512 with
// the AMX tiles, where amx_enabled(), so one process compares the two interleaved.
struct IsaArg {
  Isa isa = Isa::Scalar;
  bool ok = false;
  std::string label;
  IsaArg(benchmark::State& st, int64_t arg) {
    const bool tiles = arg == 3;
    isa = tiles ? Isa::Avx512 : (Isa)arg;
    if (isa > best_isa() || (tiles && !amx_enabled())) {
      st.SkipWithError(tiles ? "no AMX tiles here (or KVAD_ISA asks for less)" : "ISA not available");
      return;
    }
    set_amx_allowed(tiles);
    ok = true;
    label = std::string(isa_name(isa)) + (tiles ? "+amx" : "");
  }
  ~IsaArg() { set_amx_allowed(true); }
};

void BM_qmatmul(benchmark::State& st, QKind kind) {
  int64_t n = st.range(0), k = st.range(1), m = st.range(2);
  const IsaArg arg(st, st.range(3));
  if (!arg.ok) return;
  const Isa isa = arg.isa;
  std::vector<float> w = randn((size_t)(m * k), 1), x = randn((size_t)(n * k), 2), y((size_t)(n * m));
  QuantMatrix q = QuantMatrix::quantize(kind, w.data(), m, k);
  QuantActs a;
  quantize_acts(x.data(), n, k, a);
  for (auto _ : st) {
    kernels::qmatmul(a, q, y.data(), isa);
    benchmark::DoNotOptimize(y.data());
  }
  st.SetItemsProcessed(st.iterations() * n * k * m);
  st.SetBytesProcessed(st.iterations() * (int64_t)q.bytes());
  st.SetLabel(std::string(qkind_name(kind)) + " " + arg.label);
}

// GGUF K-quant rows (kernels/kqmatmul) against Q8_K activations; args as BM_qmatmul. kvad's
// quantiser writes the same block layout llama.cpp's does (Q5_K: none, so Q4_K and Q6_K).
void BM_kqmatmul(benchmark::State& st, DType type) {
  int64_t n = st.range(0), k = st.range(1), m = st.range(2);
  const IsaArg arg(st, st.range(3));
  if (!arg.ok) return;
  const Isa isa = arg.isa;
  std::vector<float> w = randn((size_t)(m * k), 1), x = randn((size_t)(n * k), 2), y((size_t)(n * m));
  KQuantMatrix q = KQuantMatrix::quantize(type, w.data(), m, k);
  KActs a;
  quantize_kacts(x.data(), n, k, a);
  for (auto _ : st) {
    kernels::kqmatmul(a, q, y.data(), isa);
    benchmark::DoNotOptimize(y.data());
  }
  st.SetItemsProcessed(st.iterations() * n * k * m);
  st.SetBytesProcessed(st.iterations() * (int64_t)q.bytes());
  st.SetLabel(std::string(dtype_name(type)) + " " + arg.label);
}

void BM_matmul(benchmark::State& st, kernels::WType wt) {
  int64_t n = st.range(0), k = st.range(1), m = st.range(2);
  const IsaArg arg(st, st.range(3));
  if (!arg.ok) return;
  const Isa isa = arg.isa;
  std::vector<float> w = randn((size_t)(m * k), 1), x = randn((size_t)(n * k), 2), y((size_t)(n * m));
  std::vector<uint16_t> wb(w.size());
  for (size_t i = 0; i < w.size(); i++) wb[i] = f32_to_bf16(w[i]);
  const void* wp = wt == kernels::WType::F32 ? (const void*)w.data() : (const void*)wb.data();
  for (auto _ : st) {
    kernels::matmul(x.data(), n, k, wp, wt, m, y.data(), isa);
    benchmark::DoNotOptimize(y.data());
  }
  st.SetItemsProcessed(st.iterations() * n * k * m);
  st.SetBytesProcessed(st.iterations() * m * k * (wt == kernels::WType::F32 ? 4 : 2));
  st.SetLabel(std::string(wt == kernels::WType::F32 ? "f32 " : "bf16 ") + arg.label);
}

// A decode step's matrix reads without the rest of the step: Qwen2.5-0.5B's 24 layers of
// q/k/v (one region), o, gate/up (one region), down, as a one-token forward issues them, each
// layer's weights at their own addresses (~220 MB at q4, past any cache). Beside BM_stream_read
// over as many bytes, the ratio is the kernels' share of the machine's read bandwidth, the part
// of issue 18's decode bound that is the kernels' and not the step's other work. Run with
// --benchmark_enable_random_interleaving=true --benchmark_repetitions=N for side-by-side figures.
struct DecodeStack {
  std::vector<QuantMatrix> mats;  // 7 per layer: q, k, v, o, gate, up, down
  std::vector<std::vector<float>> outs;
  size_t bytes = 0;
};

const DecodeStack& decode_stack(QKind kind) {
  static DecodeStack stacks[2];
  DecodeStack& d = stacks[kind == QKind::Q8 ? 0 : 1];
  if (!d.mats.empty()) return d;
  const int64_t shapes[7][2] = {{896, 896}, {128, 896}, {128, 896}, {896, 896}, {4864, 896}, {4864, 896}, {896, 4864}};
  for (int64_t layer = 0; layer < 24; layer++)
    for (int i = 0; i < 7; i++) {
      const int64_t m = shapes[i][0], k = shapes[i][1];
      std::vector<float> w = randn((size_t)(m * k), (uint64_t)(100 + layer * 7 + i));
      d.mats.push_back(QuantMatrix::quantize(kind, w.data(), m, k));
      d.outs.emplace_back((size_t)m);
      d.bytes += d.mats.back().bytes();
    }
  return d;
}

void BM_qdecode_stack(benchmark::State& st, QKind kind) {
  const DecodeStack& d = decode_stack(kind);
  std::vector<float> x896 = randn(896, 7), x4864 = randn(4864, 8);
  QuantActs a896, a4864;
  quantize_acts(x896.data(), 1, 896, a896);
  quantize_acts(x4864.data(), 1, 4864, a4864);
  auto out = [&](size_t i) { return const_cast<float*>(d.outs[i].data()); };
  // Each part's own read rate too (qkv, o, gate/up, down): a part that reads slower than the
  // others is where the step loses its share (docs/kernels.md).
  using Clock = std::chrono::steady_clock;
  double part_s[4] = {};
  size_t part_bytes[4] = {};
  for (size_t l = 0; l < d.mats.size(); l++) part_bytes[l % 7 < 3 ? 0 : l % 7 == 3 ? 1 : l % 7 < 6 ? 2 : 3] += d.mats[l].bytes();
  for (auto _ : st) {
    for (size_t l = 0; l < d.mats.size(); l += 7) {
      const QuantMatrix* qkv[3] = {&d.mats[l], &d.mats[l + 1], &d.mats[l + 2]};
      float* qkv_out[3] = {out(l), out(l + 1), out(l + 2)};
      const Clock::time_point t0 = Clock::now();
      kernels::qmatmul_multi(a896, qkv, qkv_out, 3);
      const Clock::time_point t1 = Clock::now();
      kernels::qmatmul(a896, d.mats[l + 3], out(l + 3));
      const Clock::time_point t2 = Clock::now();
      const QuantMatrix* gu[2] = {&d.mats[l + 4], &d.mats[l + 5]};
      float* gu_out[2] = {out(l + 4), out(l + 5)};
      kernels::qmatmul_multi(a896, gu, gu_out, 2);
      const Clock::time_point t3 = Clock::now();
      kernels::qmatmul(a4864, d.mats[l + 6], out(l + 6));
      const Clock::time_point t4 = Clock::now();
      const Clock::time_point at[5] = {t0, t1, t2, t3, t4};
      for (int p = 0; p < 4; p++) part_s[p] += std::chrono::duration<double>(at[p + 1] - at[p]).count();
    }
  }
  const char* part_name[4] = {"qkv_GBps", "o_GBps", "gateup_GBps", "down_GBps"};
  for (int p = 0; p < 4; p++) st.counters[part_name[p]] = (double)part_bytes[p] * (double)st.iterations() / part_s[p] / 1e9;
  st.SetBytesProcessed(st.iterations() * (int64_t)d.bytes);
  st.SetLabel(std::string(qkind_name(kind)) + " " + std::to_string(d.bytes >> 20) + " MiB");
}

// One q4 matrix shape's read rate at a fixed size (96 matrices of 4864 x 896 weights, 256 MB:
// past this CPU's L3, whose part of a 64 MB set made one thread look 1.4x faster at narrow
// widths), arg: its width k (rows = 4864 x 896 / k); a group of 16 rows is one stream of k x 10
// bytes. The down projection (k 4864) against gate/up (k 896) (docs/kernels.md, "Decode: the
// prefetch hint").
void BM_qdecode_width(benchmark::State& st) {
  const int64_t k = st.range(0), m = 4864 * 896 / k;
  static std::map<int64_t, std::vector<QuantMatrix>> by_width;
  std::vector<QuantMatrix>& mats = by_width[k];
  for (uint64_t i = mats.size(); i < 96; i++) {
    std::vector<float> w = randn((size_t)(m * k), 500 + i);
    mats.push_back(QuantMatrix::quantize(QKind::Q4, w.data(), m, k));
  }
  std::vector<float> x = randn((size_t)k, 7), y((size_t)m);
  QuantActs a;
  quantize_acts(x.data(), 1, k, a);
  size_t bytes = 0;
  for (const QuantMatrix& w : mats) bytes += w.bytes();
  for (auto _ : st)
    for (const QuantMatrix& w : mats) kernels::qmatmul(a, w, y.data());
  st.SetBytesProcessed(st.iterations() * (int64_t)bytes);
}
BENCHMARK(BM_qdecode_width)->Arg(896)->Arg(1792)->Arg(2432)->Arg(4864)->UseRealTime();

// The same for a GGUF Q4_K_M: Qwen3-0.6B's 28 layers of q, k, v, o, gate, up, down in Q4_K, with
// attn_v and ffn_down in Q6_K on the layers llama.cpp's Q4_K_M gives more bits (its
// use_more_bits: the first and last eighth and every third layer between), ~260 MB.
struct KDecodeStack {
  std::vector<KQuantMatrix> mats;
  std::vector<KQuantMatrix> huge;  // the same bytes copied into huge pages
  std::vector<std::vector<float>> outs;
  size_t bytes = 0;
};

const KDecodeStack& kdecode_stack() {
  static KDecodeStack d;
  if (!d.mats.empty()) return d;
  const int64_t shapes[7][2] = {{2048, 1024}, {1024, 1024}, {1024, 1024}, {1024, 2048}, {3072, 1024}, {3072, 1024}, {1024, 3072}};
  const int layers = 28;
  for (int layer = 0; layer < layers; layer++) {
    const bool more = layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2;
    for (int i = 0; i < 7; i++) {
      const int64_t m = shapes[i][0], k = shapes[i][1];
      const DType type = more && (i == 2 || i == 6) ? DType::Q6_K : DType::Q4_K;
      std::vector<float> w = randn((size_t)(m * k), (uint64_t)(300 + layer * 7 + i));
      d.mats.push_back(KQuantMatrix::quantize(type, w.data(), m, k));
      std::shared_ptr<uint8_t> copy = allocate_streamed_bytes(d.mats.back().bytes());
      std::memcpy(copy.get(), d.mats.back().row_data(0), d.mats.back().bytes());
      d.huge.push_back(KQuantMatrix::wrap(type, m, k, copy.get(), copy));
      d.outs.emplace_back((size_t)m);
      d.bytes += d.mats.back().bytes();
    }
  }
  return d;
}

// arg: 0 the matrices in 4 KB pages (as a GGUF's are, mapped from the file), 1 in huge pages.
void BM_kqdecode_stack(benchmark::State& st) {
  const KDecodeStack& d = kdecode_stack();
  const std::vector<KQuantMatrix>& mats = st.range(0) ? d.huge : d.mats;
  std::vector<float> x1024 = randn(1024, 7), x2048 = randn(2048, 8), x3072 = randn(3072, 9);
  KActs a1024, a2048, a3072;
  quantize_kacts(x1024.data(), 1, 1024, a1024);
  quantize_kacts(x2048.data(), 1, 2048, a2048);
  quantize_kacts(x3072.data(), 1, 3072, a3072);
  const KActs* input[7] = {&a1024, &a1024, &a1024, &a2048, &a1024, &a1024, &a3072};
  for (auto _ : st)
    for (size_t i = 0; i < mats.size(); i++)
      kernels::kqmatmul(*input[i % 7], mats[i], const_cast<float*>(d.outs[i].data()));
  st.SetBytesProcessed(st.iterations() * (int64_t)d.bytes);
  st.SetLabel("Q4_K_M " + std::to_string(d.bytes >> 20) + " MiB" + (st.range(0) ? " huge pages" : " 4 KB pages"));
}

// The reference for BM_qdecode_stack: every thread streams its half of a buffer of the q4
// stack's size (kernels/stream.h), arg: the loads' ISA (0 scalar, 1 AVX2, 2 AVX-512; `kvad
// bench` takes the best of the three, and on Zen 4 the AVX2 loads stream fastest). In huge
// pages, as `kvad bench`'s probe and a model's weights are: in 4 KB pages it read slower (49.5
// against 66 GB/s in two runs minutes apart), and the stack looked nearer its bound than it is.
void BM_stream_read(benchmark::State& st) {
  const size_t bytes = decode_stack(QKind::Q4).bytes / 4096 * 4096;
  static HugePageBuffer buf;
  if (buf.size() != bytes) {
    buf = HugePageBuffer(bytes);
    std::memset(buf.data(), 1, bytes);
  }
  for (auto _ : st) benchmark::DoNotOptimize(kernels::stream_read_threads(buf.data(), bytes, (Isa)st.range(0)));
  st.SetBytesProcessed(st.iterations() * (int64_t)bytes);
}

// An image transformer's attention (image/nn.h), SD 1.5 at 512x512: args n_q, n_kv, heads, d,
// bf16 (0/1). Level 1's self-attention (4,096 x 4,096, 8 heads of 40) is most of a step's
// attention time; 77 keys is the cross-attention on the text.
void BM_image_attention(benchmark::State& st) {
  const int64_t n_q = st.range(0), n_kv = st.range(1), heads = st.range(2), d = st.range(3);
  const bool bf16 = st.range(4) != 0;
  std::vector<float> q = randn((size_t)(n_q * heads * d), 11), k = randn((size_t)(n_kv * heads * d), 12),
                     v = randn(k.size(), 13), out(q.size());
  for (auto _ : st) {
    image::attention(q.data(), heads * d, k.data(), v.data(), heads * d, n_q, n_kv, heads, d, out.data(), bf16);
    benchmark::DoNotOptimize(out.data());
  }
  st.SetItemsProcessed(st.iterations() * 2 * n_q * n_kv * heads * d);  // MACs of the two products
  st.SetLabel(bf16 ? "bf16" : "f32");
}

// A bf16 decode's read rate: one token against 128 MB of bf16 rows in huge pages (past any
// cache), arg: the width k (896: gate/up and the head, 4864: down). Beside BM_stream_read.
void BM_bf16_decode(benchmark::State& st) {
  const int64_t k = st.range(0), m = (int64_t{128} << 20) / (2 * k);
  static std::map<int64_t, HugePageBuffer> bufs;
  HugePageBuffer& b = bufs[k];
  if (b.size() == 0) {
    b = HugePageBuffer((size_t)(m * k * 2));
    uint16_t* w = reinterpret_cast<uint16_t*>(b.data());
    for (int64_t i = 0; i < m * k; i++) w[i] = (uint16_t)(0x3f80 + (i % 97));  // 1.0 .. 1.7 in bf16
  }
  std::vector<float> x = randn((size_t)k, 3), y((size_t)m);
  for (auto _ : st) kernels::matmul(x.data(), 1, k, b.data(), kernels::WType::BF16, m, y.data());
  st.SetBytesProcessed(st.iterations() * m * k * 2);
}
BENCHMARK(BM_bf16_decode)->Arg(896)->Arg(4864)->UseRealTime();

void BM_silu_mul(benchmark::State& st) {
  const int64_t n = st.range(0);
  std::vector<float> g = randn((size_t)n, 51), u = randn((size_t)n, 52), g0 = g;
  for (auto _ : st) {
    kernels::silu_mul(g.data(), u.data(), n);
    benchmark::DoNotOptimize(g.data());
    st.PauseTiming();
    std::copy(g0.begin(), g0.end(), g.begin());
    st.ResumeTiming();
  }
  st.SetItemsProcessed(st.iterations() * n);
  st.SetBytesProcessed(st.iterations() * n * 12);
}
BENCHMARK(BM_silu_mul)->Arg(64 * 4864)->Arg(512 * 4864);

void BM_quantize_acts(benchmark::State& st) {
  int64_t n = st.range(0), k = st.range(1);
  std::vector<float> x = randn((size_t)(n * k), 3);
  QuantActs a;
  for (auto _ : st) quantize_acts(x.data(), n, k, a);
  st.SetItemsProcessed(st.iterations() * n * k);
}

void BM_empty_parallel_region(benchmark::State& st) {
  for (auto _ : st) pool().run([](int, int) {});
}

// A balanced region as a decode product's: the caller writes 1 KB of inputs, each thread reads them.
void BM_small_balanced_region(benchmark::State& st) {
  alignas(64) static int32_t in[256];
  alignas(64) static int64_t out[2][8];
  int32_t step = 0;
  for (auto _ : st) {
    step++;
    for (int i = 0; i < 256; i += 16) in[i] = step;
    pool().parallel_for_balanced(2, 1, [&](int64_t b, int64_t) {
      int64_t sum = 0;
      for (int i = 0; i < 256; i += 16) sum += in[i];
      out[b][0] = sum;
    });
    benchmark::DoNotOptimize(out);
  }
}

// Paged attention of n queries at the end of a ctx-token sequence, Qwen2.5-0.5B's heads (14 query,
// 2 KV, 64 wide), blocks of `bs` positions taken from the pool in a shuffled order (as a busy
// pool hands them out): the block-size measurement behind EngineOptions::block_size. The 4th
// argument is the cache type (0 f32, 1 bf16, 2 q8): the --kv-type measurement.
void BM_attention(benchmark::State& st) {
  int64_t n = st.range(0), ctx = st.range(1), bs = st.range(2);
  const kernels::KvType type = (kernels::KvType)st.range(3);
  kernels::AttentionShape s{14, 2, 64, 0.125f};
  int64_t blocks = (ctx + bs - 1) / bs;
  std::vector<float> q = randn((size_t)(n * 14 * 64), 4), k = randn((size_t)(ctx * 2 * 64), 5), v = randn(k.size(), 6),
                     out((size_t)(n * 14 * 64));
  std::vector<int32_t> table((size_t)blocks);
  for (int64_t i = 0; i < blocks; i++) table[(size_t)i] = (int32_t)i;
  std::shuffle(table.begin(), table.end(), std::mt19937(9));
  std::vector<uint8_t> kb((size_t)(blocks * 2 * bs * kernels::kv_row_bytes(type, 64))), vb(kb.size());
  kernels::KvPages pages{kb.data(), vb.data(), bs, type};
  kernels::AttentionSpan all{0, ctx, 0, table.data()};
  kernels::kv_store(k.data(), 2 * 64, v.data(), 2 * 64, &all, 1, 2, 64, pages);
  kernels::AttentionSpan span{0, n, ctx - n, table.data()};
  for (auto _ : st) {
    kernels::attention_paged(q.data(), 14 * 64, &span, 1, s, pages, out.data(), 14 * 64);
    benchmark::DoNotOptimize(out.data());
  }
  st.SetLabel("block " + std::to_string(bs) + " kv " + kernels::kv_type_name(type));
}

// gemm.h's packed product at an SD 1.5 UNet convolution's shape (im2col of 320 channels x 3 x 3
// against 320 outputs over 64 x 64 pixels): args bf16 (0/1), ISA (1 AVX2, 2 AVX-512, 3 AMX).
void BM_gemm_packed(benchmark::State& st) {
  const int64_t n = 4096, k = 2880, m = 320;
  const bool bf16 = st.range(0) != 0;
  const IsaArg arg(st, st.range(1));
  if (!arg.ok) return;
  const Isa isa = arg.isa;
  std::vector<float> a = randn((size_t)(n * k), 31), w = randn((size_t)(m * k), 32), c((size_t)(n * m));
  const kernels::PackedWeight pw = bf16 ? kernels::PackedWeight::pack_bf16(w.data(), m, k) : kernels::PackedWeight::pack_f32(w.data(), m, k);
  for (auto _ : st) {
    kernels::gemm_packed(a.data(), n, pw, c.data(), isa);
    benchmark::DoNotOptimize(c.data());
  }
  st.SetItemsProcessed(st.iterations() * n * k * m);
  st.SetLabel(std::string(bf16 ? "bf16 " : "f32 ") + arg.label);
}

// The trainer's product (train/gemm.h) at training config c's MLP shapes (bench/train/run.sh c:
// 8 x 256 = 2,048 tokens, 384 -> 1,536): arg 0 the forward Y = X W^T, 1 the input gradient
// dX = dY W, 2 the weight gradient dW += dY^T X, 3 the second layer's forward onto the residual
// stream (1,536 -> 384, accumulating: the `fwd fc2` of KVAD_TRAIN_PROFILE), 4 that layer's weight
// gradient dW2 += dY^T H (B is the 2,048 x 1,536 hidden activation); arg 1 bf16 (0/1).
// FLOPs as items.
void BM_train_gemm(benchmark::State& st) {
  const int64_t n = 2048, in = 384, out = 1536;
  const int which = (int)st.range(0);
  const bool bf16 = st.range(1) != 0;
  if (bf16 && !train::bf16_gemm_supported()) return st.SkipWithError("no AVX512-BF16");
  std::vector<float> x = randn((size_t)(n * in), 41), w = randn((size_t)(out * in), 42), dy = randn((size_t)(n * out), 43),
                     y((size_t)(n * out)), dx((size_t)(n * in)), dw((size_t)(out * in));
  train::GemmShape g{};
  if (which == 0) g = {n, out, in, x.data(), in, false, w.data(), in, true, y.data(), out, false, nullptr};
  if (which == 1) g = {n, in, out, dy.data(), out, false, w.data(), in, false, dx.data(), in, false, nullptr};
  if (which == 2) g = {out, in, n, dy.data(), out, true, x.data(), in, false, dw.data(), in, true, nullptr};
  if (which == 3) g = {n, in, out, dy.data(), out, false, w.data(), out, true, dx.data(), in, true, nullptr};
  if (which == 4) g = {in, out, n, x.data(), in, true, dy.data(), out, false, dw.data(), out, true, nullptr};
  g.bf16 = bf16;
  for (auto _ : st) {
    train::gemm(g);
    benchmark::DoNotOptimize(g.C);
  }
  st.SetItemsProcessed(st.iterations() * 2 * n * in * out);
  st.SetLabel(std::string(which == 0 ? "Y = X W^T" : which == 1 ? "dX = dY W" : which == 2 ? "dW += dY^T X" : which == 3 ? "Y += H W2^T" : "dW2 += dY^T H") + (bf16 ? " bf16" : " f32"));
}
BENCHMARK(BM_train_gemm)->ArgsProduct({{0, 1, 2, 3, 4}, {0, 1}})->UseRealTime();

// BM_attention's decode query as a decode step meets it: the layer's cache last touched a token
// ago, with the whole model's weights read since, so it comes from memory. Each iteration is the
// next of enough layers' caches to pass 64 MB (so none is in a cache), and stores the step's own
// key and value first, as the engine's attention does. Args: ctx (blocks of 16, Qwen2.5-0.5B's
// heads); the layout: each layer's caches in 4 KB pages, as `Memory` mapped them until 2026-12-05
// (0), the same in one huge-page buffer (1), or the engine's `Memory` as it is, block-major in huge
// pages (2: docs/kv-cache.md, "Block-major, in huge pages"); the cache type (0 f32, 1 bf16, 2 q8).
MemorySpec spec_with_type(MemorySpec spec, kernels::KvType type) {
  spec.kv_type = type;
  return spec;
}

void BM_attention_cold(benchmark::State& st) {
  const int64_t ctx = st.range(0), bs = 16, blocks = (ctx + bs - 1) / bs;
  const kernels::AttentionShape s{14, 2, 64, 0.125f};
  const kernels::KvType type = (kernels::KvType)st.range(2);
  const int64_t layer_bytes = blocks * 2 * bs * kernels::kv_row_bytes(type, 64);
  const int64_t layers = std::max<int64_t>(2, (int64_t{64} << 20) / layer_bytes);
  std::vector<int32_t> table((size_t)blocks);
  for (int64_t i = 0; i < blocks; i++) table[(size_t)i] = (int32_t)i;
  std::vector<float> q = randn((size_t)(14 * 64), 4), k = randn((size_t)(ctx * 2 * 64), 5), v = randn(k.size(), 6),
                     out((size_t)(14 * 64));
  const int64_t layout = st.range(1);
  std::vector<uint8_t> small_pages((size_t)(layout == 0 ? 2 * layers * layer_bytes : 0));
  HugePageBuffer huge_pages(layout == 1 ? (size_t)(2 * layers * layer_bytes) : 0);
  std::unique_ptr<Memory> engine =
      layout == 2 ? std::make_unique<Memory>(spec_with_type(MemorySpec::attention(layers, 2, 64), type), blocks, bs) : nullptr;
  uint8_t* kb = layout == 0 ? small_pages.data() : huge_pages.data();
  auto pages_of = [&](int64_t l) {
    if (engine) return engine->pages(l);
    return kernels::KvPages{kb + l * layer_bytes, kb + (layers + l) * layer_bytes, bs, type};
  };
  kernels::AttentionSpan all{0, ctx, 0, table.data()};
  for (int64_t l = 0; l < layers; l++) kernels::kv_store(k.data(), 2 * 64, v.data(), 2 * 64, &all, 1, 2, 64, pages_of(l));
  kernels::AttentionSpan span{0, 1, ctx - 1, table.data()};
  int64_t l = 0;
  for (auto _ : st) {
    // The step's own key and value first, as the engine's attention stores them.
    kernels::kv_store(k.data(), 2 * 64, v.data(), 2 * 64, &span, 1, 2, 64, pages_of(l));
    kernels::attention_paged(q.data(), 14 * 64, &span, 1, s, pages_of(l), out.data(), 14 * 64);
    benchmark::DoNotOptimize(out.data());
    l = (l + 1) % layers;
  }
  st.SetLabel(std::to_string(layers) + " layers' caches, kv " + kernels::kv_type_name(type));
}

// One decode query of DeepSeek-V2-Lite's attention (16 heads, nope 128, rope 64, v 128, latent 512)
// at the end of a ctx-token sequence, f32 cache, blocks of 16 in shuffled order. Arg 1: 0 = the
// absorbed form kvad runs (absorb the query through W_UK, attend over the 576-wide latent rows,
// expand through W_UV: 576 values a position); 1 = the naive form over the expanded per-head cache
// (16 KV heads, keys 192 wide, values 128 of them: 6,144 values a position, what transformers
// caches), for the cost of each. Arg 2: the ISA of the absorb / expand loops.
void BM_latent_attention(benchmark::State& st) {
  const int64_t ctx = st.range(0), bs = 16, blocks = (ctx + bs - 1) / bs;
  const bool naive = st.range(1) == 1;
  const Isa isa = (Isa)st.range(2);
  if (isa > best_isa()) return st.SkipWithError("ISA not available");
  const kernels::LatentShape ls{16, 128, 64, 512, 128, 0.1f};
  kernels::AttentionShape s = naive ? kernels::AttentionShape{16, 16, 192, 0.1f} : ls.attention();
  if (naive) s.value_dim = 128;
  const int64_t width = (int64_t)s.n_kv_heads * s.head_dim;
  std::vector<int32_t> table((size_t)blocks);
  for (int64_t i = 0; i < blocks; i++) table[(size_t)i] = (int32_t)i;
  std::shuffle(table.begin(), table.end(), std::mt19937(9));
  std::vector<float> rows = randn((size_t)(ctx * width), 5), q = randn((size_t)(16 * 192), 4),
                     kv_b = randn((size_t)(16 * 256 * 512), 6), qa((size_t)(16 * 576)), u((size_t)(16 * 512)),
                     out((size_t)(16 * 128));
  std::vector<uint8_t> kb((size_t)(blocks * width * bs * 4)), vb(naive ? kb.size() : 0);
  kernels::KvPages pages{kb.data(), naive ? vb.data() : kb.data(), bs, kernels::KvType::F32};
  kernels::AttentionSpan all{0, ctx, 0, table.data()};
  kernels::kv_store(rows.data(), width, naive ? rows.data() : nullptr, width, &all, 1, s.n_kv_heads, s.head_dim, pages);
  kernels::AttentionSpan span{0, 1, ctx - 1, table.data()};
  for (auto _ : st) {
    if (naive) {
      kernels::attention_paged(q.data(), 16 * 192, &span, 1, s, pages, out.data(), 16 * 128);
    } else {
      kernels::absorb_queries(q.data(), 16 * 192, 1, ls, kv_b.data(), qa.data(), 16 * 576, isa);
      kernels::attention_paged(qa.data(), 16 * 576, &span, 1, s, pages, u.data(), 16 * 512);
      kernels::expand_values(u.data(), 16 * 512, 1, ls, kv_b.data(), out.data(), 16 * 128, isa);
    }
    benchmark::DoNotOptimize(out.data());
  }
  st.SetLabel(naive ? "naive, 6144 values a position" : "absorbed, 576 values a position");
}

// One token's sampling over Qwen's vocabulary (151,936 logits, normal with sd 3: a spread like a
// model's): arg 0 picks the settings, greedy / kvad's default (temperature 0.8) / top-k 40 /
// top-p 0.9 / Qwen2.5's generation_config (0.7, top-k 20, top-p 0.8, repetition 1.05). Runs on
// the calling thread alone between two forwards, so every microsecond is a decode step's.
void BM_sample(benchmark::State& st) {
  SamplingParams p;
  switch (st.range(0)) {
    case 0: p.temperature = 0; break;
    case 1: break;
    case 2: p.top_k = 40; break;
    case 3: p.top_p = 0.9f; break;
    default: p.temperature = 0.7f, p.top_k = 20, p.top_p = 0.8f, p.repetition_penalty = 1.05f;
  }
  const std::vector<float> logits = randn(151936, 21);
  std::vector<float> scaled(logits.size());
  std::vector<int32_t> context(600);
  for (size_t i = 0; i < context.size(); i++) context[i] = (int32_t)(i * 251 % 151936);
  std::vector<int32_t> generated(context.end() - 100, context.end());
  Sampler sampler(p);
  for (auto _ : st) {
    for (size_t i = 0; i < logits.size(); i++) scaled[i] = 3 * logits[i];
    benchmark::DoNotOptimize(sampler.sample(scaled, context, generated));
  }
  const char* names[] = {"greedy", "temperature 0.8", "top-k 40", "top-p 0.9", "qwen2.5 defaults"};
  st.SetLabel(names[st.range(0)]);
}

// Qwen2.5-0.5B: hidden 896, MLP 4864, vocab 151936; decode (1 token) and prefill (128 tokens).
void shapes(benchmark::internal::Benchmark* b) {
  for (int isa = 0; isa <= 3; isa++)
    for (int64_t n : {1, 8, 128})
      for (auto km : {std::pair<int64_t, int64_t>{896, 896}, {896, 4864}, {4864, 896}})
        if (isa < 3 || n >= 16) b->Args({n, km.first, km.second, isa});  // the tiles are for prefill
  for (int64_t n : {1, 4, 8, 16}) b->Args({n, 896, 151936, 2});  // the vocabulary projection: 136 MB at q8, past L3
  b->UseRealTime();
}

// Qwen3-0.6B's shapes (K-quants need inputs in multiples of 256), its tied Q6_K head past L3.
void kshapes(benchmark::internal::Benchmark* b) {
  for (int isa = 0; isa <= 3; isa++)
    for (int64_t n : {1, 8, 16, 32, 128})
      for (auto km : {std::pair<int64_t, int64_t>{1024, 1024}, {1024, 3072}, {3072, 1024}})
        if (isa < 3 || n >= 16) b->Args({n, km.first, km.second, isa});
  for (int64_t n : {1, 4}) b->Args({n, 1024, 151936, 2});
  for (int64_t isa : {1, 2, 3})
    for (auto km : {std::pair<int64_t, int64_t>{1024, 3072}, {3072, 1024}}) b->Args({512, km.first, km.second, isa});  // prefill 512
  b->UseRealTime();
}

}  // namespace

BENCHMARK_CAPTURE(BM_qmatmul, q8, QKind::Q8)->Apply(shapes);
BENCHMARK_CAPTURE(BM_qmatmul, q4, QKind::Q4)->Apply(shapes);
BENCHMARK_CAPTURE(BM_kqmatmul, q4k, DType::Q4_K)->Apply(kshapes);
BENCHMARK_CAPTURE(BM_kqmatmul, q6k, DType::Q6_K)->Apply(kshapes);
BENCHMARK_CAPTURE(BM_matmul, f32, kernels::WType::F32)->Apply(shapes);
BENCHMARK_CAPTURE(BM_matmul, bf16, kernels::WType::BF16)->Apply(shapes);
BENCHMARK_CAPTURE(BM_qdecode_stack, q8, QKind::Q8)->UseRealTime();
BENCHMARK_CAPTURE(BM_qdecode_stack, q4, QKind::Q4)->UseRealTime();
BENCHMARK(BM_kqdecode_stack)->DenseRange(0, 1)->UseRealTime();
BENCHMARK(BM_stream_read)->DenseRange(0, 2)->UseRealTime();
BENCHMARK(BM_image_attention)->ArgsProduct({{4096}, {4096}, {8}, {40}, {0, 1}})->ArgsProduct({{1024}, {1024}, {8}, {80}, {0, 1}})
    ->ArgsProduct({{4096}, {77}, {8}, {40}, {0, 1}})->ArgsProduct({{4096}, {4096}, {1}, {512}, {0, 1}})->UseRealTime();
BENCHMARK(BM_quantize_acts)->Args({1, 896})->Args({128, 896})->Args({128, 4864})->UseRealTime();
BENCHMARK(BM_empty_parallel_region)->UseRealTime();
BENCHMARK(BM_small_balanced_region)->UseRealTime();
BENCHMARK(BM_gemm_packed)->ArgsProduct({{0, 1}, {1, 2, 3}})->UseRealTime();
BENCHMARK(BM_sample)->DenseRange(0, 4)->UseRealTime();
BENCHMARK(BM_attention)->ArgsProduct({{1}, {512, 4096}, {4, 16, 64, 256, 4096}, {0}})->Args({1, 80, 16, 0})->Args({128, 128, 16, 0})->Args({512, 512, 16, 0})
    ->ArgsProduct({{1}, {1024, 4096}, {16}, {0, 1, 2}})
    ->Args({512, 512, 256, 0})->UseRealTime();
BENCHMARK(BM_attention_cold)->ArgsProduct({{80, 512, 2048, 4096}, {0, 1, 2}, {0, 1, 2}})->UseRealTime();
BENCHMARK(BM_latent_attention)->ArgsProduct({{512, 4096}, {0}, {0, 1, 2}})->ArgsProduct({{512, 4096}, {1}, {2}})->UseRealTime();

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  // KVAD_MICRO_THREADS=N: the pool's size (default: every core), e.g. 1 to see a core's own rate.
  if (const char* t = std::getenv("KVAD_MICRO_THREADS")) set_threads(std::atoi(t));
  benchmark::AddCustomContext("kvad_cpu", cpu_summary());
  benchmark::AddCustomContext("threads", std::to_string(pool().size()));
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
