// Which backend a model runs on: `--device cpu` (kvad's kernels, the default) or `--device gpu[:N]`
// (the Vulkan backend, src/vulkan/). The registry says which architectures the GPU runs; any
// other is refused here by name, before a weight is copied.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "models/model.h"
#include "runtime/engine.h"
#include "runtime/loader.h"

namespace kvad {

// "cpu", "gpu" or "gpu:N"; throws naming the flag otherwise.
void check_device_name(const std::string& device);
bool is_gpu_device(const std::string& device);
// The backend for `device`, refusing an architecture the device's backend does not run.
std::unique_ptr<Backend> make_backend(const std::string& device, const Model& model);
// Whether the GPU backend runs this architecture (the registry's Architecture::gpu).
bool gpu_runs(const std::string& architecture);
// "gpu" when `--device gpu` would find a device (a CPU driver only with KVAD_VULKAN_ALLOW_CPU=1), else "".
std::string default_gpu_device();
// The same without a model (the backend tests).
std::unique_ptr<Backend> make_backend(const std::string& device);
// Whether this binary has the Vulkan backend (built with libvulkan-dev and glslc).
bool gpu_backend_built();
// The Vulkan devices as --device names them ("gpu:N"), with their names; empty (and *why) when none.
struct GpuDevice {
  std::string spec, name;
  bool cpu = false;  // a CPU driver (lavapipe)
};
std::vector<GpuDevice> list_gpu_devices(std::string* why);
// Sets o.weight_cache and its stamp for a model the GPU runs in a layout of its own (q8, q4): the
// .gpu-<format>.nq file beside the CPU's cache, stamped with the model's files (size, mtime).
void set_gpu_weight_cache(EngineOptions& o, const LoadedModel& m);
// GB/s the shaders of `device` ("gpu" or "gpu:N") read from its memory (kvad bench's share of
// bandwidth on a GPU); 0 without the Vulkan backend.
double measure_gpu_read_bandwidth_gbs(const std::string& device);
// `kvad devices`: the CPU, then every Vulkan device with its index, type and memory, or why there is none.
std::string describe_devices();

}  // namespace kvad
