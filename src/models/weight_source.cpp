#include "models/weight_source.h"

#include <cstring>

#include "core/error.h"

namespace kvad {

static bool packed(DType t) { return t == DType::KQ8 || t == DType::KQ4; }

static Weight wrap_packed(const TensorView& t, int64_t rows, int64_t cols) {
  if (t.shape != std::vector<int64_t>{rows, cols})
    fail("{}: cached tensor '{}' has shape {}, expected [{}, {}]", t.file, t.name, t.shape_str(), rows, cols);
  return Weight::from_quant(QuantMatrix::wrap(t.dtype == DType::KQ8 ? QKind::Q8 : QKind::Q4, rows, cols, t.data, nullptr));
}

Weight WeightSource::matrix(const std::string& name, int64_t rows, int64_t cols) {
  TensorView t = ck_.get(name);
  Weight w = packed(t.dtype) ? wrap_packed(t, rows, cols) : Weight::from_tensor(ck_.get(name, {rows, cols}), fmt_);
  if (record_) recorded_.push_back({name, w, nullptr, {}});
  return w;
}

Weight WeightSource::matrix_transposed(const std::string& name, int64_t in, int64_t out) {
  TensorView t = ck_.get(name);
  Weight w = packed(t.dtype) ? wrap_packed(t, out, in) : Weight::from_tensor_transposed(ck_.get(name, {in, out}), fmt_);
  if (record_) recorded_.push_back({name, w, nullptr, {}});
  return w;
}

std::vector<float> WeightSource::vector(const std::string& name, const std::vector<int64_t>& shape) {
  std::vector<float> v = to_f32(ck_.get(name, shape));
  if (record_) recorded_.push_back({name, Weight(), std::make_shared<std::vector<float>>(v), shape});
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
