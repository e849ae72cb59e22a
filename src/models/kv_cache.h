// The KV cache of standard attention: per layer and KV head, keys and values of every position
// held, contiguous by position so attention streams through them. Grows by doubling.
#pragma once
#include <cstdint>
#include <vector>

#include "models/model.h"

namespace kvad {

class KvCache : public ModelState {
 public:
  KvCache(int64_t n_layers, int64_t n_kv_heads, int64_t head_dim);
  int64_t size() const override { return size_; }
  int64_t truncate(int64_t n) override;
  size_t bytes() const override;
  size_t bytes_per_token() const override;

  // Makes room for positions up to `n` (exclusive).
  void reserve(int64_t n);
  // Writes k/v rows ([n_new, n_kv_heads * head_dim]) for positions size()..size()+n_new-1 of a layer.
  void write(int64_t layer, const float* k, const float* v, int64_t n_new);
  // After every layer has written: the new positions become part of the cache.
  void commit(int64_t n_new) { size_ += n_new; }
  const float* keys(int64_t layer) const { return k_[(size_t)layer].data(); }
  const float* values(int64_t layer) const { return v_[(size_t)layer].data(); }
  int64_t head_stride() const { return capacity_ * head_dim_; }

 private:
  int64_t n_layers_, n_kv_, head_dim_;
  int64_t size_ = 0, capacity_ = 0;
  std::vector<std::vector<float>> k_, v_;  // [layer][kv_head][capacity][head_dim]
};

}  // namespace kvad
