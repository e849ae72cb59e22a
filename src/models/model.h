// Model: config, weights, and forward(tokens at the next positions, state). A single token is the
// narrow case of a batch: one forward, matrix-vector when the batch is 1. The per-sequence state
// (KV cache today; latent or recurrent state for later architectures) is made by the model and
// owned by whoever runs it (runtime::Session), so one model can serve many sequences.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "models/config.h"

namespace kvad {

class ModelState {
 public:
  virtual ~ModelState() = default;
  // Positions held.
  virtual int64_t size() const = 0;
  // Drops positions >= n where possible; returns the number actually kept (a recurrent state may
  // only be able to go back to 0). Callers forward from the returned position.
  virtual int64_t truncate(int64_t n) = 0;
  virtual size_t bytes() const = 0;           // memory held now
  virtual size_t bytes_per_token() const = 0;  // what one more position costs
};

class Model {
 public:
  virtual ~Model() = default;
  const ModelConfig& config() const { return config_; }
  int64_t context_length() const { return config_.max_positions; }

  virtual std::unique_ptr<ModelState> new_state() const = 0;
  // Runs tokens[0..n) at positions state.size() .. state.size()+n-1 and appends them to the state.
  // logits receives [vocab] for the last token, or [n, vocab] when all_positions.
  virtual void forward(const int32_t* tokens, int64_t n, ModelState& state, float* logits,
                       bool all_positions = false) const = 0;
  virtual size_t weight_bytes() const = 0;
  // Bytes one decode step reads: every weight except an untied embedding table (one row of it).
  virtual size_t decode_read_bytes() const = 0;
  virtual std::string weight_format() const = 0;  // e.g. "bf16", "f32"
  virtual int64_t parameter_count() const = 0;

  // Weights may point into a memory-mapped checkpoint: the model keeps it alive.
  void hold(std::shared_ptr<const void> storage) { storage_ = std::move(storage); }

 protected:
  ModelConfig config_;

 private:
  std::shared_ptr<const void> storage_;
};

}  // namespace kvad
