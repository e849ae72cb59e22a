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
#include "models/tensors.h"

namespace kvad {

class Model {
 public:
  virtual ~Model() = default;
  const ModelConfig& config() const { return config_; }
  int64_t context_length() const { return config_.max_positions; }
  // Floats the forward writes per output row.
  int64_t output_width(const Batch& b) const { return b.output() == RowOutput::Hidden ? config_.hidden : config_.vocab_size; }

  // What each layer keeps per sequence (the runtime sizes the pool from it).
  virtual MemorySpec memory_spec() const = 0;
  // Runs every row of `batch`, storing each row's keys/values in `memory` at its position, and
  // writes the logits of the rows that want them to logits[batch.n_logits(), vocab], in row order
  // (or, when batch.output() is Hidden, their final hidden states to logits[batch.n_logits(), hidden]).
  virtual void forward(const Batch& batch, Memory& memory, Backend& ops, float* logits) const = 0;
  // Sizes derived from the family's tensor table at load (models/tensors.h), never hand-kept.
  size_t weight_bytes() const { return sizes_.weight_bytes; }
  // Bytes one decode step reads: every weight, but one row of a lookup table (an untied embedding,
  // GPT-2's position table).
  size_t decode_read_bytes() const { return sizes_.decode_read_bytes; }
  int64_t parameter_count() const { return sizes_.parameters; }
  virtual std::string weight_format() const = 0;  // e.g. "bf16", "f32"

  // The projections a LoRA adapter may sit beside (models/lora.h), from the tensor table.
  const std::vector<AdaptableMatrix>& adaptable() const { return adaptable_; }
  // Every matrix by its checkpoint name, each once (models/tensors.h).
  const std::vector<NamedWeight>& matrices() const { return matrices_; }

  // Weights may point into a memory-mapped checkpoint: the model keeps it alive.
  void hold(std::shared_ptr<const Checkpoint> checkpoint) { checkpoint_ = std::move(checkpoint); }
  // For a model whose one engine copied every matrix to a GPU (Engine::weights_on_device): the
  // host's copies go, heap freed and a file mapping's pages dropped from this process, which a
  // 0.5B q8 model run on the GPU held at 0.5 GB of heap (first run) or 0.5 GB of mapped cache.
  // The model then runs on that device only: a host product fails naming why.
  void release_host_matrices();

 protected:
  // Refuses a batch with a position past the model's context (every family calls it first).
  void check_positions(const Batch& batch) const;
  // The end of an RMSNorm family's forward: the rows that want output, normed, then through the
  // head into logits (or, for a Hidden batch, the normed states themselves).
  void rmsnorm_head_outputs(Backend& ops, const Batch& b, Tensor x, const std::vector<float>& final_norm,
                            const Weight& head, float* out) const;
  ModelConfig config_;
  TensorStats sizes_;  // set by the family's constructor from its loaded table
  std::vector<AdaptableMatrix> adaptable_;  // likewise
  std::vector<NamedWeight> matrices_;        // likewise

 private:
  std::shared_ptr<const Checkpoint> checkpoint_;
};

}  // namespace kvad
