#include "backend/batch.h"

#include "core/error.h"

namespace kvad {

void Batch::add(int32_t seq, std::span<const int32_t> tokens, int64_t pos0, std::span<const int32_t> blocks,
                int64_t block_size, Logits logits, std::span<const LoraUse> loras) {
  const int64_t n = (int64_t)tokens.size();
  if (n == 0) fail("Batch::add: no tokens for sequence {}", seq);
  if ((int64_t)blocks.size() * block_size < pos0 + n)
    fail("Batch::add: sequence {} has {} blocks of {} for positions up to {}", seq, blocks.size(), block_size, pos0 + n);
  const int64_t row0 = (int64_t)rows_.size();
  for (int64_t t = 0; t < n; t++) {
    bool want = logits == Logits::All || (logits == Logits::Last && t == n - 1);
    rows_.push_back({tokens[(size_t)t], seq, pos0 + t, want});
    n_logits_ += want;
  }
  spans_.push_back({seq, row0, n, pos0, blocks, loras, -1, nullptr, block_size});
  has_lora_ = has_lora_ || !loras.empty();
  attn_.push_back({row0, n, pos0, blocks.data()});
}

}  // namespace kvad
