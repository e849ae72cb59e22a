#include "backend/weight.h"

#include <atomic>

#include <algorithm>
#include <cstring>

#include "core/dtype.h"
#include "core/huge_pages.h"
#include "core/error.h"
#include "core/threads.h"
#include "kernels/matmul.h"
#include "kernels/kqmatmul.h"
#include "kernels/qmatmul.h"
#include "quant/activations.h"

namespace kvad {

WeightFormat parse_weight_format(const std::string& s) {
  if (s == "auto" || s.empty()) return WeightFormat::AsStored;
  if (s == "f32") return WeightFormat::F32;
  if (s == "bf16") return WeightFormat::BF16;
  if (s == "q8") return WeightFormat::Q8;
  if (s == "q4") return WeightFormat::Q4;
  if (s == "q4k") return WeightFormat::Q4K;
  if (s == "q6k") return WeightFormat::Q6K;
  fail("unknown weight format '{}' (expected f32, bf16, q8, q4, q4k or q6k)", s);
}

const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::F32: return "f32";
    case WeightFormat::BF16: return "bf16";
    case WeightFormat::Q8: return "q8";
    case WeightFormat::Q4: return "q4";
    case WeightFormat::Q4K: return "q4k";
    case WeightFormat::Q6K: return "q6k";
    default: return "auto";
  }
}

void check_kquant_widths(WeightFormat fmt, const std::vector<int64_t>& widths, const std::string& what) {
  if (fmt != WeightFormat::Q4K && fmt != WeightFormat::Q6K) return;
  for (int64_t w : widths)
    if (w % kQK != 0)
      fail("{}: --quant {} needs every matrix width to be a multiple of 256, and this model has width {}; use --quant "
           "q8 or q4 instead",
           what, weight_format_name(fmt), w);
}

std::vector<float> to_f32(const TensorView& t) {
  std::vector<float> out((size_t)t.numel());
  if (dtype_is_block(t.dtype)) {
    dequantize_blocks(t.dtype, t.data, t.numel(), out.data());
  } else switch (t.dtype) {
    case DType::F32: std::memcpy(out.data(), t.data, t.nbytes); break;
    case DType::BF16:
      for (size_t i = 0; i < out.size(); i++) {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        out[i] = bf16_to_f32(h);
      }
      break;
    case DType::F16:
      for (size_t i = 0; i < out.size(); i++) {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        out[i] = f16_to_f32(h);
      }
      break;
    case DType::F8_E4M3:  // its values mean nothing without the scales beside it
      fail("{}: tensor '{}' is F8_E4M3, which kvad reads only as a matrix with its block scales ('{}_scale_inv')",
           t.file, t.name, t.name);
    default: fail("{}: tensor '{}' has dtype {}, expected a float type", t.file, t.name, dtype_name(t.dtype));
  }
  if (t.transposed && t.shape.size() == 2) {  // stored [b][a], wanted [a][b]
    int64_t a = t.dim(0), b = t.dim(1);
    std::vector<float> tr(out.size());
    for (int64_t i = 0; i < b; i++)
      for (int64_t j = 0; j < a; j++) tr[(size_t)(j * b + i)] = out[(size_t)(i * a + j)];
    out.swap(tr);
  }
  return out;
}

static bool aligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

Weight Weight::from_quant(QuantMatrix q) {
  Weight w;
  w.rows_ = q.rows();
  w.cols_ = q.cols();
  w.quantized_ = true;
  w.q_ = std::move(q);
  return w;
}

Weight Weight::from_kquant(KQuantMatrix q) {
  Weight w;
  w.rows_ = q.rows();
  w.cols_ = q.cols();
  w.kq_ = std::move(q);
  return w;
}

// GGUF blocks in their own format (fmt AsStored): kvad's packed q8/q4 where that is lossless,
// K-quants in place.
static Weight from_blocks(const TensorView& t) {
  const int64_t rows = t.dim(0), cols = t.dim(1);
  if (KQuantMatrix::supports(t.dtype)) return Weight::from_kquant(KQuantMatrix::wrap(t.dtype, rows, cols, t.data, nullptr));
  const size_t bb = dtype_block_bytes(t.dtype), row_bytes = (size_t)(cols / 32) * bb;
  auto f16 = [](const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return f16_to_f32(h);
  };
  auto block = [&](int64_t r, int64_t b) { return t.data + (size_t)r * row_bytes + (size_t)b * bb; };
  switch (t.dtype) {
    case DType::Q8_0:  // w = d * q, q in [-128, 127]: code q + 128 with kvad's implied m = -128 d
      return Weight::from_quant(QuantMatrix::build(QKind::Q8, rows, cols, [&](int64_t r, int64_t b, uint8_t* c, float* d, float*) {
        const uint8_t* p = block(r, b);
        *d = f16(p);
        for (int i = 0; i < 32; i++) c[i] = (uint8_t)((int8_t)p[2 + i] + 128);
      }));
    case DType::Q5_0:  // w = d * (q - 16), q in [0, 31]: code q + 112
      return Weight::from_quant(QuantMatrix::build(QKind::Q8, rows, cols, [&](int64_t r, int64_t b, uint8_t* c, float* d, float*) {
        const uint8_t* p = block(r, b);
        *d = f16(p);
        uint32_t qh;
        std::memcpy(&qh, p + 2, 4);
        for (int j = 0; j < 16; j++) {
          c[j] = (uint8_t)(((p[6 + j] & 0xF) | (((qh >> j) << 4) & 0x10)) + 112);
          c[j + 16] = (uint8_t)(((p[6 + j] >> 4) | ((qh >> (j + 12)) & 0x10)) + 112);
        }
      }));
    case DType::Q4_0:  // w = d * (q - 8): q4 code q, m = -8 d (exact in f16)
    case DType::Q4_1:  // w = d * q + m
      return Weight::from_quant(QuantMatrix::build(QKind::Q4, rows, cols, [&](int64_t r, int64_t b, uint8_t* c, float* d, float* m) {
        const uint8_t* p = block(r, b);
        bool q41 = t.dtype == DType::Q4_1;
        *d = f16(p);
        *m = q41 ? f16(p + 2) : -8.0f * *d;
        const uint8_t* qs = p + (q41 ? 4 : 2);
        for (int j = 0; j < 16; j++) {
          c[j] = qs[j] & 0xF;
          c[j + 16] = qs[j] >> 4;
        }
      }));
    default: fail("internal: {} is not packed by from_blocks", dtype_name(t.dtype));
  }
}

Weight Weight::from_f32(std::vector<float> v, int64_t rows, int64_t cols, WeightFormat fmt) {
  if (fmt == WeightFormat::Q4K || fmt == WeightFormat::Q6K)
    return from_kquant(KQuantMatrix::quantize(fmt == WeightFormat::Q4K ? DType::Q4_K : DType::Q6_K, v.data(), rows, cols));
  if (fmt == WeightFormat::Q8 || fmt == WeightFormat::Q4)
    return from_quant(QuantMatrix::quantize(fmt == WeightFormat::Q8 ? QKind::Q8 : QKind::Q4, v.data(), rows, cols));
  Weight w;
  w.rows_ = rows;
  w.cols_ = cols;
  w.wt_ = fmt == WeightFormat::BF16 ? kernels::WType::BF16 : kernels::WType::F32;
  uint8_t* bytes = w.allocate_owned(w.bytes());
  if (w.wt_ == kernels::WType::F32) {
    std::memcpy(bytes, v.data(), v.size() * 4);
  } else {
    uint16_t* d = reinterpret_cast<uint16_t*>(bytes);
    for (size_t i = 0; i < v.size(); i++) d[i] = f32_to_bf16(v[i]);
  }
  return w;
}

uint8_t* Weight::allocate_owned(size_t bytes) {
  std::shared_ptr<uint8_t> buf = allocate_streamed_bytes(bytes);
  uint8_t* p = buf.get();
  owned_ = std::move(buf);
  data_ = p;
  return p;
}

bool Weight::copy_into_huge_pages() {
  const size_t n = bytes();
  if (kq_ || quantized_ || owned_ || !data_ || n < HugePageBuffer::kHugePage) return false;
  const void* from = data_;
  std::memcpy(allocate_owned(n), from, n);
  return true;
}

Weight Weight::from_tensor(const TensorView& t, WeightFormat fmt) {
  if (t.shape.size() != 2) fail("{}: tensor '{}' must be 2-D, has shape {}", t.file, t.name, t.shape_str());
  if (t.transposed) return from_f32(to_f32(t), t.dim(0), t.dim(1), fmt == WeightFormat::AsStored ? WeightFormat::F32 : fmt);
  if (dtype_is_block(t.dtype) && fmt == WeightFormat::AsStored) {
    if (t.dtype == DType::Q5_1) return from_f32(to_f32(t), t.dim(0), t.dim(1), WeightFormat::F32);  // no lossless kvad form
    return from_blocks(t);
  }
  if (fmt == WeightFormat::AsStored) fmt = t.dtype == DType::BF16 ? WeightFormat::BF16 : WeightFormat::F32;
  bool f32_in_place = fmt == WeightFormat::F32 && t.dtype == DType::F32 && aligned(t.data, 4);
  bool bf16_in_place = fmt == WeightFormat::BF16 && t.dtype == DType::BF16 && aligned(t.data, 2);
  if (f32_in_place || bf16_in_place) {
    Weight w;
    w.rows_ = t.dim(0);
    w.cols_ = t.dim(1);
    w.wt_ = f32_in_place ? kernels::WType::F32 : kernels::WType::BF16;
    w.data_ = t.data;
    return w;
  }
  return from_f32(to_f32(t), t.dim(0), t.dim(1), fmt);
}

Weight Weight::from_tensor_transposed(const TensorView& t, WeightFormat fmt) {
  if (t.shape.size() != 2) fail("{}: tensor '{}' must be 2-D, has shape {}", t.file, t.name, t.shape_str());
  if (t.transposed) {  // already stored [out, in] (GGUF): no transpose, blocks used as they are
    TensorView s = t;
    s.shape = {t.dim(1), t.dim(0)};
    s.transposed = false;
    return from_tensor(s, fmt);
  }
  if (fmt == WeightFormat::AsStored) fmt = t.dtype == DType::BF16 ? WeightFormat::BF16 : WeightFormat::F32;
  std::vector<float> src = to_f32(t), tr(src.size());
  int64_t in = t.dim(0), out = t.dim(1);
  for (int64_t i = 0; i < in; i++)
    for (int64_t o = 0; o < out; o++) tr[(size_t)(o * in + i)] = src[(size_t)(i * out + o)];
  return from_f32(std::move(tr), out, in, fmt);
}

void Weight::matmul(const float* x, int64_t n, float* y) const {
  require_host();
  if (kq_) {
    thread_local KActs acts;
    quantize_kacts(x, n, cols_, acts);
    kernels::kqmatmul(acts, kq_, y);
    return;
  }
  if (quantized_) {
    thread_local QuantActs acts;  // reused: no allocation per call in steady state
    quantize_acts(x, n, cols_, acts);
    kernels::qmatmul(acts, q_, y);
    return;
  }
  kernels::matmul(x, n, cols_, data_, wt_, rows_, y);
}

void Weight::matmul_serial(const float* x, int64_t n, float* y) const {
  require_host();
  if (quantized_ || kq_) return matmul(x, n, y);
  kernels::rows_kernel(wt_, best_isa(), n)(x, n, cols_, data_, rows_, 0, rows_, y);
}

void Weight::matmul_group(const float* x, int64_t n, std::initializer_list<std::pair<const Weight*, float*>> outs) {
  constexpr int kMax = 4;
  int count = (int)outs.size();
  bool all_q = count <= kMax, all_dense = count <= kMax, all_kq = count <= kMax;
  for (auto& [w, y] : outs) {
    w->require_host();
    all_q = all_q && w->quantized_ && !w->kq_ && w->cols_ == outs.begin()->first->cols_;
    all_dense = all_dense && !w->quantized_ && !w->kq_;
    all_kq = all_kq && w->kq_ && w->cols_ == outs.begin()->first->cols_;
  }
  if (all_q) {
    thread_local QuantActs acts;
    quantize_acts(x, n, outs.begin()->first->cols_, acts);
    const QuantMatrix* ws[kMax];
    float* ys[kMax];
    int i = 0;
    for (auto& [w, y] : outs) ws[i] = &w->q_, ys[i++] = y;
    kernels::qmatmul_multi(acts, ws, ys, count);
  } else if (all_dense) {
    const void* ws[kMax];
    kernels::WType wts[kMax];
    int64_t ms[kMax];
    float* ys[kMax];
    int i = 0;
    for (auto& [w, y] : outs) ws[i] = w->data_, wts[i] = w->wt_, ms[i] = w->rows_, ys[i++] = y;
    kernels::matmul_multi(x, n, outs.begin()->first->cols_, ws, wts, ms, ys, count);
  } else if (all_kq && (n < kernels::kKqTileTokens || !kernels::kq_tiles_allowed())) {
    // A decode step's q/k/v (Q4_K beside a Q6_K v in a Q4_K_M) or gate/up: the activations
    // quantised once and one parallel region, where one per matrix woke the pool three times.
    Job jobs[kMax];
    int i = 0;
    for (auto& [w, y] : outs) jobs[i++] = Job{w, x, n, y};
    matmul_jobs(jobs, count);
  } else {
    for (auto& [w, y] : outs) w->matmul(x, n, y);
  }
}

namespace {

// Rows per unit of work in matmul_jobs: a quantised matrix's group, and the dense kernels' grain.
constexpr int64_t kJobRows = QuantMatrix::kRows;

int64_t job_units(const Weight& w) { return (w.rows() + kJobRows - 1) / kJobRows; }

}  // namespace

void Weight::matmul_jobs(const Job* jobs, int count) {
  // Per job: the index of its activations (shared with an earlier job over the same input).
  // Reused across calls (no allocation in steady state); named through references because the
  // pool's threads must read THIS thread's buffers, not their own thread_local copies.
  thread_local std::vector<QuantActs> qacts_buffer;
  thread_local std::vector<KActs> kacts_buffer;
  thread_local std::vector<int> act_buffer;
  thread_local std::vector<int64_t> first_unit_buffer;  // count + 1 prefix sums of job_units
  std::vector<QuantActs>& qacts = qacts_buffer;
  std::vector<KActs>& kacts = kacts_buffer;
  std::vector<int>& act = act_buffer;
  std::vector<int64_t>& first_unit = first_unit_buffer;
  act.resize((size_t)count);
  first_unit.resize((size_t)count + 1);
  if (qacts.size() < (size_t)count) qacts.resize((size_t)count);
  if (kacts.size() < (size_t)count) kacts.resize((size_t)count);
  int64_t work = 0, bytes = 0;
  bool all_quantized = true;
  first_unit[0] = 0;
  for (int i = 0; i < count; i++) {
    const Job& j = jobs[i];
    const Weight& w = *j.w;
    w.require_host();
    first_unit[(size_t)i + 1] = first_unit[(size_t)i] + job_units(w);
    work += j.n * w.rows_ * w.cols_;
    bytes += (int64_t)w.bytes();
    all_quantized = all_quantized && (w.quantized_ || w.kq_);
    act[(size_t)i] = i;
    if (!w.quantized_ && !w.kq_) continue;
    // Jobs over one input come together (an expert's gate and up; one token's experts), so the
    // job before is the only one to compare with.
    const Job* o = i > 0 ? &jobs[i - 1] : nullptr;
    if (o && o->x == j.x && o->n == j.n && o->w->cols_ == w.cols_ && (bool)o->w->kq_ == (bool)w.kq_ &&
        o->w->quantized_ == w.quantized_) {
      act[(size_t)i] = act[(size_t)i - 1];
      continue;
    }
    if (w.kq_) quantize_kacts(j.x, j.n, w.cols_, kacts[(size_t)i]);
    else quantize_acts(j.x, j.n, w.cols_, qacts[(size_t)i]);
  }
  const Isa isa = best_isa();
  // Read here: the pool's threads have their own tiles switch.
  const bool kq_tiles = kernels::kq_tiles_allowed() && kernels::kgroups_tiles_kernel(isa);
  auto run = [&](int64_t u0, int64_t u1) {
    for (int i = 0; i < count && first_unit[(size_t)i] < u1; i++) {
      const int64_t base = first_unit[(size_t)i], b = std::max(u0, base) - base,
                    e = std::min(u1, first_unit[(size_t)i + 1]) - base;
      if (b >= e) continue;
      const Job& j = jobs[i];
      const Weight& w = *j.w;
      const int64_t r0 = b * kJobRows, r1 = std::min(w.rows_, e * kJobRows);
      if (w.kq_ && kq_tiles && j.n >= kernels::kKqTileTokens)  // prefill: a unit is a tile group
        kernels::kgroups_tiles_kernel(isa, j.n)(kacts[(size_t)act[(size_t)i]], w.kq_, b, e, j.y);
      else if (w.kq_) kernels::krows_kernel(w.kq_.type(), isa)(kacts[(size_t)act[(size_t)i]], w.kq_, r0, r1, j.y);
      else if (w.quantized_) kernels::qgroups_kernel(w.q_.kind(), isa, j.n)(qacts[(size_t)act[(size_t)i]], w.q_, b, e, j.y);
      else kernels::rows_kernel(w.wt_, isa, j.n)(j.x, j.n, w.cols_, w.data_, w.rows_, r0, r1, j.y);
      if (j.then) j.then(j.ctx, r0, r1);
    }
  };
  const int64_t units = first_unit[(size_t)count];
  if (work < (int64_t{1} << 16)) run(0, units);  // too small to be worth waking the pool
  // Quantised products take pieces, so a thread held up does not hold the rest; the dense
  // kernels rearrange their input once per call, which per 32 KB piece cost bf16 prefill 3.6x.
  else if (all_quantized) pool().parallel_for_balanced(units, ThreadPool::items_per_piece(bytes / units), run);
  else pool().parallel_for(units, 1, run);
}

void Weight::row(int64_t i, float* out) const {
  require_host();
  if (kq_) return kq_.row(i, out);
  if (quantized_) return q_.row(i, out);
  if (wt_ == kernels::WType::F32) {
    std::memcpy(out, static_cast<const float*>(data_) + i * cols_, (size_t)cols_ * 4);
  } else {
    const uint16_t* r = static_cast<const uint16_t*>(data_) + i * cols_;
    for (int64_t c = 0; c < cols_; c++) out[c] = bf16_to_f32(r[c]);
  }
}

uint64_t Weight::uid() const {
  static std::atomic<uint64_t> next{1};
  if (uid_ == 0) uid_ = next.fetch_add(1);
  return uid_;
}

const void* Weight::host_bytes() const {
  if (kq_) return kq_.row_data(0);
  if (quantized_) return q_.data();
  return data_;
}

void Weight::release_host_bytes() {
  data_ = nullptr;
  owned_.reset();
  q_.release_bytes();
  kq_.release_bytes();
  host_released_ = true;
}

void Weight::require_host() const {
  if (host_released_)
    fail("a {} x {} {} weight lives on the GPU only: its host copy was released once the GPU held it, so it cannot "
         "run on the CPU (load the model again for that)",
         rows_, cols_, format_name());
}

size_t Weight::bytes() const {
  if (kq_) return kq_.bytes();
  if (quantized_) return q_.bytes();
  return (size_t)(rows_ * cols_) * (wt_ == kernels::WType::F32 ? 4 : 2);
}

const char* Weight::format_name() const {
  if (kq_) return kq_.type() == DType::Q4_K ? "q4_K" : kq_.type() == DType::Q5_K ? "q5_K" : "q6_K";
  if (quantized_) return qkind_name(q_.kind());
  return wt_ == kernels::WType::F32 ? "f32" : "bf16";
}

}  // namespace kvad
