#include "models/model.h"

#include "core/error.h"

namespace kvad {

void Model::release_host_matrices() {
  for (const NamedWeight& nw : matrices_) {
    // Listed const for the backends to read; the weights are this model's own tensor table's.
    Weight& w = const_cast<Weight&>(*nw.weight);
    if (const void* p = w.host_bytes(); p && checkpoint_) {
      TensorView bytes;
      bytes.data = static_cast<const uint8_t*>(p);
      bytes.nbytes = w.bytes();
      checkpoint_->release(bytes);  // a file's pages, when the weight was used in place
    }
    w.release_host_bytes();
  }
}

void Model::check_positions(const Batch& batch) const {
  for (const BatchSpan& s : batch.spans())
    if (s.pos0 < 0 || s.pos0 + s.n > config_.max_positions)
      fail("context full: {} positions held + {} new > the model's {}", s.pos0, s.n, config_.max_positions);
}

void Model::rmsnorm_head_outputs(Backend& ops, const Batch& b, Tensor x, const std::vector<float>& final_norm,
                                 const Weight& head, float* out) const {
  if (b.n_logits() == 0) return;
  const ModelConfig& c = config_;
  Tensor last = ops.tensor(b.n_logits(), c.hidden);
  ops.logit_rows(x, b, last);
  if (b.output() == RowOutput::Hidden) {  // embeddings: the normed state is the answer, no head
    ops.rmsnorm(last, final_norm, c.norm_eps, Tensor::wrap(out, b.n_logits(), c.hidden));
    return;
  }
  ops.rmsnorm(last, final_norm, c.norm_eps, last);
  ops.linear(head, last, Tensor::wrap(out, b.n_logits(), c.vocab_size));
}

}  // namespace kvad
