#include "models/kv_cache.h"

#include <algorithm>
#include <cstring>

namespace kvad {

KvCache::KvCache(int64_t n_layers, int64_t n_kv_heads, int64_t head_dim)
    : n_layers_(n_layers), n_kv_(n_kv_heads), head_dim_(head_dim), k_((size_t)n_layers), v_((size_t)n_layers) {}

int64_t KvCache::truncate(int64_t n) {
  size_ = std::clamp<int64_t>(n, 0, size_);
  return size_;
}

size_t KvCache::bytes() const { return (size_t)(2 * n_layers_ * n_kv_ * capacity_ * head_dim_) * sizeof(float); }

size_t KvCache::bytes_per_token() const { return (size_t)(2 * n_layers_ * n_kv_ * head_dim_) * sizeof(float); }

void KvCache::reserve(int64_t n) {
  if (n <= capacity_) return;
  int64_t cap = std::max<int64_t>({n, 2 * capacity_, 64});
  for (int64_t l = 0; l < n_layers_; l++) {
    for (auto* buf : {&k_[(size_t)l], &v_[(size_t)l]}) {
      std::vector<float> grown((size_t)(n_kv_ * cap * head_dim_));
      if (size_ > 0)  // an empty cache has no buffer yet (memcpy from null is undefined even for 0 bytes)
        for (int64_t h = 0; h < n_kv_; h++)
          std::memcpy(grown.data() + h * cap * head_dim_, buf->data() + h * capacity_ * head_dim_,
                      (size_t)(size_ * head_dim_) * sizeof(float));
      buf->swap(grown);
    }
  }
  capacity_ = cap;
}

void KvCache::write(int64_t layer, const float* k, const float* v, int64_t n_new) {
  reserve(size_ + n_new);
  int64_t row = n_kv_ * head_dim_;
  for (int64_t t = 0; t < n_new; t++)
    for (int64_t h = 0; h < n_kv_; h++) {
      size_t dst = (size_t)((h * capacity_ + size_ + t) * head_dim_);
      std::memcpy(k_[(size_t)layer].data() + dst, k + t * row + h * head_dim_, (size_t)head_dim_ * sizeof(float));
      std::memcpy(v_[(size_t)layer].data() + dst, v + t * row + h * head_dim_, (size_t)head_dim_ * sizeof(float));
    }
}

}  // namespace kvad
