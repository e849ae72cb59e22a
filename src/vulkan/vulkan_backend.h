// The Vulkan backend: the Backend calls (backend/backend.h) as compute shaders on a Vulkan
// device, so every architecture file runs on a GPU unchanged. Weights are copied to the device on
// first use (f32, bf16, and kvad's q8/q4 in a row-major layout of their own); the KV pages live in
// device memory; a forward is recorded into one command buffer and submitted when its output (the
// logits of the rows that want them) is read back.
#pragma once
#include <memory>
#include <string>

#include "backend/backend.h"

namespace kvad {

// device: "gpu" or "gpu:N" (vulkan/device.h). Throws naming the reason when there is no usable device.
std::unique_ptr<Backend> make_vulkan_backend(const std::string& device);

}  // namespace kvad
