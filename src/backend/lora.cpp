#include "backend/lora.h"

#include <algorithm>

#include "core/error.h"

namespace kvad {

void LoraAdapter::add(const Weight* base, LoraPair pair, const std::string& what) {
  if (!pairs_.emplace(base, std::move(pair)).second) fail("{}: {} is adapted twice", path_, what);
}

int64_t LoraAdapter::max_rank() const {
  int64_t r = 0;
  for (const auto& [w, p] : pairs_) r = std::max(r, p.a.rows());
  return r;
}

size_t LoraAdapter::bytes() const {
  size_t n = 0;
  for (const auto& [w, p] : pairs_) n += p.a.bytes() + p.bt.size() * sizeof(float) + p.bt_bf16.size() * sizeof(uint16_t);
  return n;
}

}  // namespace kvad
