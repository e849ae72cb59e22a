#include "models/weight.h"

#include <cstring>

#include "core/dtype.h"
#include "core/error.h"

namespace kvad {

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

static kernels::WType target_type(DType stored, DenseFormat fmt) {
  if (fmt == DenseFormat::F32) return kernels::WType::F32;
  if (fmt == DenseFormat::BF16) return kernels::WType::BF16;
  return stored == DType::BF16 ? kernels::WType::BF16 : kernels::WType::F32;
}

static bool aligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

// Converts `src` (already in [rows, cols] order) into an owned buffer of the target type.
static std::shared_ptr<std::vector<uint8_t>> convert(const std::vector<float>& src, kernels::WType wt) {
  auto buf = std::make_shared<std::vector<uint8_t>>();
  if (wt == kernels::WType::F32) {
    buf->resize(src.size() * 4);
    std::memcpy(buf->data(), src.data(), buf->size());
  } else {
    buf->resize(src.size() * 2);
    uint16_t* d = reinterpret_cast<uint16_t*>(buf->data());
    for (size_t i = 0; i < src.size(); i++) d[i] = f32_to_bf16(src[i]);
  }
  return buf;
}

Weight Weight::from_tensor(const TensorView& t, DenseFormat fmt) {
  if (t.shape.size() != 2) fail("{}: tensor '{}' must be 2-D, has shape {}", t.file, t.name, t.shape_str());
  Weight w;
  w.rows_ = t.dim(0);
  w.cols_ = t.dim(1);
  w.wt_ = target_type(t.dtype, fmt);
  bool in_place = ((w.wt_ == kernels::WType::F32 && t.dtype == DType::F32 && aligned(t.data, 4)) ||
                   (w.wt_ == kernels::WType::BF16 && t.dtype == DType::BF16 && aligned(t.data, 2)));
  if (in_place) {
    w.data_ = t.data;
  } else if (w.wt_ == kernels::WType::BF16 && t.dtype == DType::BF16) {
    w.owned_ = std::make_shared<std::vector<uint8_t>>(t.data, t.data + t.nbytes);
    w.data_ = w.owned_->data();
  } else {
    w.owned_ = convert(to_f32(t), w.wt_);
    w.data_ = w.owned_->data();
  }
  return w;
}

Weight Weight::from_tensor_transposed(const TensorView& t, DenseFormat fmt) {
  if (t.shape.size() != 2) fail("{}: tensor '{}' must be 2-D, has shape {}", t.file, t.name, t.shape_str());
  std::vector<float> src = to_f32(t), tr(src.size());
  int64_t in = t.dim(0), out = t.dim(1);
  for (int64_t i = 0; i < in; i++)
    for (int64_t o = 0; o < out; o++) tr[(size_t)(o * in + i)] = src[(size_t)(i * out + o)];
  Weight w;
  w.rows_ = out;
  w.cols_ = in;
  w.wt_ = target_type(t.dtype, fmt);
  w.owned_ = convert(tr, w.wt_);
  w.data_ = w.owned_->data();
  return w;
}

void Weight::matmul(const float* x, int64_t n, float* y) const {
  kernels::matmul(x, n, cols_, data_, wt_, rows_, y);
}

void Weight::row(int64_t i, float* out) const {
  if (wt_ == kernels::WType::F32) {
    std::memcpy(out, static_cast<const float*>(data_) + i * cols_, (size_t)cols_ * 4);
  } else {
    const uint16_t* r = static_cast<const uint16_t*>(data_) + i * cols_;
    for (int64_t c = 0; c < cols_; c++) out[c] = bf16_to_f32(r[c]);
  }
}

size_t Weight::bytes() const { return (size_t)(rows_ * cols_) * (wt_ == kernels::WType::F32 ? 4 : 2); }

const char* Weight::format_name() const { return wt_ == kernels::WType::F32 ? "f32" : "bf16"; }

}  // namespace kvad
