// Model: config, weights, and a forward over a Batch. The batch's rows may come from many
// sequences at their own positions; their keys and values go to the engine-wide Memory (one kind
// per layer, as memory_spec() says), and every computation goes through a Backend, so the same
// architecture file runs on any backend. A single token is the narrow case of a batch.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "models/config.h"

namespace kvad {

class Model {
 public:
  virtual ~Model() = default;
  const ModelConfig& config() const { return config_; }
  int64_t context_length() const { return config_.max_positions; }

  // What each layer keeps per sequence (the runtime sizes the pool from it).
  virtual MemorySpec memory_spec() const = 0;
  // Runs every row of `batch`, storing each row's keys/values in `memory` at its position, and
  // writes the logits of the rows that want them to logits[batch.n_logits(), vocab], in row order.
  virtual void forward(const Batch& batch, Memory& memory, Backend& ops, float* logits) const = 0;
  virtual size_t weight_bytes() const = 0;
  // Bytes one decode step reads: every weight except an untied embedding table (one row of it).
  virtual size_t decode_read_bytes() const = 0;
  virtual std::string weight_format() const = 0;  // e.g. "bf16", "f32"
  virtual int64_t parameter_count() const = 0;

  // Weights may point into a memory-mapped checkpoint: the model keeps it alive.
  void hold(std::shared_ptr<const void> storage) { storage_ = std::move(storage); }

 protected:
  // Refuses a batch with a position past the model's context (every family calls it first).
  void check_positions(const Batch& batch) const;
  ModelConfig config_;

 private:
  std::shared_ptr<const void> storage_;
};

}  // namespace kvad
