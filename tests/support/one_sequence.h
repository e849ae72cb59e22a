// One sequence through a model, for model-level tests (which link the models layer only, not the
// runtime's Engine): a private KV pool whose block table is a shuffled permutation, so every test
// that runs a model also runs the paged attention across non-adjacent blocks. A model with
// recurrent layers gets one state slot (slot 0, starting at zeros).
#pragma once
#include <algorithm>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "models/model.h"

namespace kvad::test {

class OneSequence {
 public:
  explicit OneSequence(const Model& m, int64_t block_size = 16, int64_t max_positions = 4096,
                       std::vector<LoraUse> loras = {})
      : m_(m), ops_(make_cpu_backend()), loras_(std::move(loras)) {
    int64_t ctx = std::min(m.context_length(), max_positions);
    int64_t n = (ctx + block_size - 1) / block_size;
    const bool recurrent = !m.memory_spec().rewindable();
    mem_ = ops_->make_memory(m.memory_spec(), n, block_size, recurrent ? 1 : 0);
    if (recurrent) {
      mem_->clear_state(0);
      state_ = 0;
    }
    table_.resize((size_t)n);
    std::iota(table_.begin(), table_.end(), 0);
    std::shuffle(table_.begin(), table_.end(), std::mt19937(1234));
  }
  // Runs tokens[0..n) at the next positions; logits receives [vocab] for the last token, or
  // [n, vocab] when all_positions.
  void forward(const int32_t* tokens, int64_t n, float* logits, bool all_positions = false) {
    Batch b;
    b.add(0, std::span<const int32_t>(tokens, (size_t)n), pos_, table_, mem_->block_size(),
          all_positions ? Logits::All : Logits::Last, loras_);
    b.set_state(state_);
    m_.forward(b, *mem_, *ops_, logits);
    pos_ += n;
  }
  int64_t size() const { return pos_; }

 private:
  const Model& m_;
  std::unique_ptr<Backend> ops_;
  std::vector<LoraUse> loras_;  // the adapters this sequence runs with
  std::unique_ptr<Memory> mem_;
  std::vector<int32_t> table_;
  int64_t pos_ = 0;
  int32_t state_ = -1;
};

}  // namespace kvad::test
