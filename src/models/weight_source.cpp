#include "models/weight_source.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/huge_pages.h"
#include "core/meminfo.h"
#include "core/threads.h"

namespace kvad {

static bool packed(DType t) { return t == DType::KQ8 || t == DType::KQ4; }

static Weight wrap_packed(const TensorView& t, int64_t rows, int64_t cols) {
  if (t.shape != std::vector<int64_t>{rows, cols})
    fail("{}: cached tensor '{}' has shape {}, expected [{}, {}]", t.file, t.name, t.shape_str(), rows, cols);
  return Weight::from_quant(QuantMatrix::wrap(t.dtype == DType::KQ8 ? QKind::Q8 : QKind::Q4, rows, cols, t.data, nullptr));
}

namespace {

// The f32 value of every F8_E4M3 byte, made once.
const std::array<float, 256>& fp8_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; i++) t[(size_t)i] = fp8_e4m3_to_f32((uint8_t)i);
    return t;
  }();
  return table;
}

// The scales of the FP8 matrix t, one per b.rows x b.cols block (the last ones partial, as
// DeepSeek's weight_dequant masks them): checked to be that many and finite.
std::vector<float> fp8_scales(const TensorView& t, const TensorView& s, Fp8Blocks b) {
  const std::vector<int64_t> want = {(t.dim(0) + b.rows - 1) / b.rows, (t.dim(1) + b.cols - 1) / b.cols};
  if (s.shape != want)
    fail("{}: '{}' has shape {}, but '{}' {} in blocks of {} x {} (quantization_config.weight_block_size) needs "
         "[{}, {}]",
         s.file, s.name, s.shape_str(), t.name, t.shape_str(), b.rows, b.cols, want[0], want[1]);
  std::vector<float> v = to_f32(s);
  for (size_t i = 0; i < v.size(); i++)
    if (!std::isfinite(v[i]))
      fail("{}: '{}' holds the scale {} for block [{}, {}]: not finite", s.file, s.name, v[i], i / want[1], i % want[1]);
  return v;
}

// Row r of an FP8 matrix of `cols` bytes into f32, block by block; false if it holds a NaN code.
bool dequantize_fp8_row(const uint8_t* w, int64_t cols, const float* scales, int64_t block, float* out) {
  const std::array<float, 256>& lut = fp8_table();
  for (int64_t c0 = 0, b = 0; c0 < cols; c0 += block, b++) {
    const int64_t c1 = std::min(cols, c0 + block);
    for (int64_t c = c0; c < c1; c++) out[c] = lut[w[c]] * scales[b];
  }
  return std::none_of(w, w + cols, [](uint8_t x) { return (x & 0x7f) == 0x7f; });
}

}  // namespace

std::vector<float> WeightSource::fp8_values(const TensorView& t) {
  const std::string scale_name = t.name + "_scale_inv";
  if (t.shape.size() != 2)
    fail("{}: tensor '{}' is F8_E4M3 of shape {}; kvad reads FP8 only as a matrix with block scales", t.file, t.name,
         t.shape_str());
  if (!ck_.has(scale_name))
    fail("{}: tensor '{}' is F8_E4M3 but its block scales '{}' are not in the checkpoint", t.file, t.name, scale_name);
  if (!fp8_.any())
    fail("{}: tensor '{}' is F8_E4M3 but config.json has no quantization_config (quant_method 'fp8', "
         "weight_block_size) to say how '{}' scales it",
         t.file, t.name, scale_name);
  const std::vector<float> scales = fp8_scales(t, ck_.get(scale_name), fp8_);
  const int64_t rows = t.dim(0), cols = t.dim(1), per_row = (cols + fp8_.cols - 1) / fp8_.cols;
  std::vector<float> out((size_t)(rows * cols));
  std::atomic<int64_t> nan_row{-1};
  pool().parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++)
      if (!dequantize_fp8_row(t.data + r * cols, cols, &scales[(size_t)((r / fp8_.rows) * per_row)], fp8_.cols,
                              &out[(size_t)(r * cols)]))
        nan_row = r;
  });
  if (nan_row >= 0) fail("{}: tensor '{}' holds a NaN code (0x7f or 0xff) in row {}", t.file, t.name, nan_row.load());
  return out;
}

// An FP8 matrix becomes bf16 unless a format was asked for: what DeepSeek's own conversion
// (inference/fp8_cast_bf16.py) makes of it, half of f32's bytes and within 2^-9 of fp8 x scale.
Weight WeightSource::dense(const TensorView& t) {
  if (t.dtype != DType::F8_E4M3) return Weight::from_tensor(t, fmt_);
  return Weight::from_f32(fp8_values(t), t.dim(0), t.dim(1), fmt_ == WeightFormat::AsStored ? WeightFormat::BF16 : fmt_);
}

void WeightSource::copy_in_place_weights() {
  // Copies only pay where the kernel gives huge pages; and a model larger than half of what is
  // free stays mapped for the rest, so it still runs paged from the file.
  copy_budget_ = transparent_huge_pages_enabled() ? meminfo_bytes("MemAvailable") / 2 : 0;
}

Weight WeightSource::held(Weight w, const TensorView& t) {
  if (auto it = copied_.find(t.data); it != copied_.end()) return it->second;
  if (w.host_bytes() != t.data) {  // converted (quantised, widened, transposed): t is not read again
    ck_.release(t);
    return w;
  }
  // (A quantised weight, a cache's packed bytes among them, is never copied: copy_into_huge_pages
  // takes dense weights used in place only.)
  if (copy_budget_ < w.bytes() || !w.copy_into_huge_pages()) return w;
  copy_budget_ -= w.bytes();
  ck_.release(t);
  copied_.emplace(t.data, w);
  return w;
}

void WeightSource::report_progress(WeightsProgress f) {
  progress_ = std::move(f);
  total_ = (int64_t)ck_.names().size();
}

void WeightSource::read_one() {
  read_++;
  if (progress_) progress_(std::min(read_, total_), total_);
}

Weight WeightSource::matrix(const std::string& name, int64_t rows, int64_t cols) {
  TensorView t = ck_.get(name);
  Weight w = held(packed(t.dtype) ? wrap_packed(t, rows, cols) : dense(ck_.get(name, {rows, cols})), t);
  if (record_) recorded_.push_back({name, w, nullptr, {}});
  read_one();
  return w;
}

Weight WeightSource::matrix_transposed(const std::string& name, int64_t in, int64_t out) {
  TensorView t = ck_.get(name);
  if (t.dtype == DType::F8_E4M3)  // no FP8 checkpoint stores a Conv1D (GPT-2's [in, out]) matrix
    fail("{}: tensor '{}' is F8_E4M3, which kvad reads only for [out, in] matrices", t.file, name);
  Weight w = held(packed(t.dtype) ? wrap_packed(t, out, in) : Weight::from_tensor_transposed(ck_.get(name, {in, out}), fmt_), t);
  if (record_) recorded_.push_back({name, w, nullptr, {}});
  read_one();
  return w;
}

std::vector<float> WeightSource::vector(const std::string& name, const std::vector<int64_t>& shape) {
  TensorView t = ck_.get(name, shape);
  std::vector<float> v = t.dtype == DType::F8_E4M3 ? fp8_values(t) : to_f32(t);
  ck_.release(t);  // a copy: the file's pages need not stay resident beside it
  if (record_) recorded_.push_back({name, Weight(), std::make_shared<std::vector<float>>(v), shape});
  read_one();
  return v;
}

bool WeightSource::same_tensor(const std::string& a, const std::string& b, const std::vector<int64_t>& shape) {
  if (auto* nq = dynamic_cast<NqCheckpoint*>(&ck_)) {  // the cache only records identical pairs
    ck_.get(a);
    ck_.get(b);
    return nq->alias_of(a) == b || nq->alias_of(b) == a;
  }
  TensorView x = ck_.get(a, shape), y = ck_.get(b, shape);
  bool same = x.dtype == y.dtype && x.nbytes == y.nbytes && std::memcmp(x.data, y.data, x.nbytes) == 0;
  if (same && record_) aliases_.push_back({a, b});
  return same;
}

void WeightSource::write_cache(const std::string& path, const Json& stamp) const {
  NqWriter w;
  for (const Recorded& r : recorded_) {
    if (r.v) {
      w.add(r.name, DType::F32, r.shape, (const uint8_t*)r.v->data(), r.v->size() * 4);
    } else if (r.w.quantized()) {
      const QuantMatrix& q = r.w.quant();
      w.add(r.name, q.kind() == QKind::Q8 ? DType::KQ8 : DType::KQ4, {q.rows(), q.cols()}, q.data(), q.bytes());
    } else {
      fail("internal: only quantised loads are cached ('{}' is {})", r.name, r.w.format_name());
    }
  }
  for (auto& [a, b] : aliases_) w.alias(a, b);
  w.write(path, stamp);
}

}  // namespace kvad
