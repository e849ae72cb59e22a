#include "models/model.h"

#include "core/error.h"

namespace kvad {

void Model::check_positions(const Batch& batch) const {
  for (const BatchSpan& s : batch.spans())
    if (s.pos0 < 0 || s.pos0 + s.n > config_.max_positions)
      fail("context full: {} positions held + {} new > the model's {}", s.pos0, s.n, config_.max_positions);
}

}  // namespace kvad
