#include "models/weight.h"

#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/qmatmul.h"
#include "quant/activations.h"

namespace kvad {

WeightFormat parse_weight_format(const std::string& s) {
  if (s == "auto" || s.empty()) return WeightFormat::AsStored;
  if (s == "f32") return WeightFormat::F32;
  if (s == "bf16") return WeightFormat::BF16;
  if (s == "q8") return WeightFormat::Q8;
  if (s == "q4") return WeightFormat::Q4;
  fail("unknown weight format '{}' (expected f32, bf16, q8 or q4)", s);
}

const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::F32: return "f32";
    case WeightFormat::BF16: return "bf16";
    case WeightFormat::Q8: return "q8";
    case WeightFormat::Q4: return "q4";
    default: return "auto";
  }
}

std::vector<float> to_f32(const TensorView& t) {
  std::vector<float> out((size_t)t.numel());
  switch (t.dtype) {
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
    default: fail("{}: tensor '{}' has dtype {}, expected a float type", t.file, t.name, dtype_name(t.dtype));
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

Weight Weight::from_f32(std::vector<float> v, int64_t rows, int64_t cols, WeightFormat fmt) {
  if (fmt == WeightFormat::Q8 || fmt == WeightFormat::Q4)
    return from_quant(QuantMatrix::quantize(fmt == WeightFormat::Q8 ? QKind::Q8 : QKind::Q4, v.data(), rows, cols));
  Weight w;
  w.rows_ = rows;
  w.cols_ = cols;
  w.wt_ = fmt == WeightFormat::BF16 ? kernels::WType::BF16 : kernels::WType::F32;
  w.owned_ = std::make_shared<std::vector<uint8_t>>();
  if (w.wt_ == kernels::WType::F32) {
    w.owned_->resize(v.size() * 4);
    std::memcpy(w.owned_->data(), v.data(), w.owned_->size());
  } else {
    w.owned_->resize(v.size() * 2);
    uint16_t* d = reinterpret_cast<uint16_t*>(w.owned_->data());
    for (size_t i = 0; i < v.size(); i++) d[i] = f32_to_bf16(v[i]);
  }
  w.data_ = w.owned_->data();
  return w;
}

Weight Weight::from_tensor(const TensorView& t, WeightFormat fmt) {
  if (t.shape.size() != 2) fail("{}: tensor '{}' must be 2-D, has shape {}", t.file, t.name, t.shape_str());
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
  if (fmt == WeightFormat::AsStored) fmt = t.dtype == DType::BF16 ? WeightFormat::BF16 : WeightFormat::F32;
  std::vector<float> src = to_f32(t), tr(src.size());
  int64_t in = t.dim(0), out = t.dim(1);
  for (int64_t i = 0; i < in; i++)
    for (int64_t o = 0; o < out; o++) tr[(size_t)(o * in + i)] = src[(size_t)(i * out + o)];
  return from_f32(std::move(tr), out, in, fmt);
}

void Weight::matmul(const float* x, int64_t n, float* y) const {
  if (quantized_) {
    thread_local QuantActs acts;  // reused: no allocation per call in steady state
    quantize_acts(x, n, cols_, acts);
    kernels::qmatmul(acts, q_, y);
    return;
  }
  kernels::matmul(x, n, cols_, data_, wt_, rows_, y);
}

void Weight::row(int64_t i, float* out) const {
  if (quantized_) return q_.row(i, out);
  if (wt_ == kernels::WType::F32) {
    std::memcpy(out, static_cast<const float*>(data_) + i * cols_, (size_t)cols_ * 4);
  } else {
    const uint16_t* r = static_cast<const uint16_t*>(data_) + i * cols_;
    for (int64_t c = 0; c < cols_; c++) out[c] = bf16_to_f32(r[c]);
  }
}

size_t Weight::bytes() const {
  if (quantized_) return q_.bytes();
  return (size_t)(rows_ * cols_) * (wt_ == kernels::WType::F32 ? 4 : 2);
}

const char* Weight::format_name() const {
  if (quantized_) return qkind_name(q_.kind());
  return wt_ == kernels::WType::F32 ? "f32" : "bf16";
}

}  // namespace kvad
