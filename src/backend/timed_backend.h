// Where a forward's time goes, op by op, on any backend: KVAD_PROFILE=1 wraps the backend that
// make_backend returns in one that times each call on the host (steady_clock around it) and prints,
// when the backend closes, the time per operation, split into decode calls (one row) and batch
// calls (prefill). On the CPU a call's time is its work; on the GPU it is the recording (the
// GPU's own times: KVAD_VULKAN_PROFILE). A decode step's time outside every call (the model's glue,
// sampling, the engine) is the run's time less the table's total.
#pragma once
#include <memory>

#include "backend/backend.h"

namespace kvad {

// KVAD_PROFILE is set and not "0".
bool backend_profile_requested();
// `inner` behind a timer per call; its table goes to stderr when the returned backend is destroyed.
std::unique_ptr<Backend> make_timed_backend(std::unique_ptr<Backend> inner);

}  // namespace kvad
