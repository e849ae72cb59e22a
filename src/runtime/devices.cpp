#include "runtime/devices.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "backend/timed_backend.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/meminfo.h"
#include "core/threads.h"
#include "models/registry.h"
#include "runtime/nq_cache.h"
#ifdef KVAD_HAVE_VULKAN
#include "vulkan/device.h"
#include "vulkan/vulkan_backend.h"
#endif

namespace kvad {

bool is_gpu_device(const std::string& device) { return device == "gpu" || device.rfind("gpu:", 0) == 0; }

void check_device_name(const std::string& device) {
  if (device == "cpu" || device == "gpu") return;
  if (device.rfind("gpu:", 0) == 0 && device.size() > 4 && device.size() < 8 &&
      device.find_first_not_of("0123456789", 4) == std::string::npos)
    return;
  fail("--device {}: expected cpu, gpu or gpu:N (`kvad devices` lists them)", device);
}

bool gpu_backend_built() {
#ifdef KVAD_HAVE_VULKAN
  return true;
#else
  return false;
#endif
}

static std::unique_ptr<Backend> make_untimed_backend(const std::string& device) {
  if (device == "cpu") return make_cpu_backend();
#ifdef KVAD_HAVE_VULKAN
  return make_vulkan_backend(device);
#else
  fail("--device {}: this kvad was built without the Vulkan backend (install libvulkan-dev and glslc, then rebuild)",
       device);
#endif
}

std::unique_ptr<Backend> make_backend(const std::string& device) {
  check_device_name(device);
  std::unique_ptr<Backend> be = make_untimed_backend(device);
  return backend_profile_requested() ? make_timed_backend(std::move(be)) : std::move(be);
}

bool gpu_runs(const std::string& architecture) {
  for (const Architecture& a : architectures())
    if (a.gpu && a.name == architecture) return true;
  return false;
}

std::string default_gpu_device() {
#ifdef KVAD_HAVE_VULKAN
  for (const vk::DeviceInfo& d : vk::list_devices(nullptr))
    if (!d.cpu() || vk::allow_cpu_devices()) return "gpu";
#endif
  return "";
}

std::unique_ptr<Backend> make_backend(const std::string& device, const Model& model) {
  check_device_name(device);
  if (is_gpu_device(device) && !gpu_runs(model.config().architecture)) {
    std::string gpu_archs;
    for (const Architecture& a : architectures())
      if (a.gpu) gpu_archs += (gpu_archs.empty() ? "" : ", ") + a.name;
    fail("--device {}: {} does not run on the GPU backend yet (it runs {}); use --device cpu", device,
         model.config().architecture, gpu_archs);
  }
  return make_backend(device);
}

std::vector<GpuDevice> list_gpu_devices(std::string* why) {
  std::vector<GpuDevice> out;
#ifdef KVAD_HAVE_VULKAN
  for (const vk::DeviceInfo& d : vk::list_devices(why)) out.push_back({fmt::format("gpu:{}", d.index), d.name, d.cpu()});
#else
  if (why) *why = "this kvad was built without the Vulkan backend";
#endif
  return out;
}

void set_gpu_weight_cache(EngineOptions& o, const LoadedModel& m) {
  if (!is_gpu_device(o.device) || !m.model) return;
  const std::string f = m.model->weight_format();
  if (f != "q8" && f != "q4") return;  // dense and K-quant weights go to the device as they are
  std::error_code ec;
  std::vector<std::string> sources;
  if (std::filesystem::is_directory(m.path, ec)) {
    for (const auto& e : std::filesystem::directory_iterator(m.path, ec))
      if (e.path().extension() == ".safetensors") sources.push_back(e.path().string());
  } else {
    sources.push_back(m.path);  // a .gguf
  }
  std::sort(sources.begin(), sources.end());
  const Json files = file_stamps(sources);
  o.weight_cache = gpu_nq_cache_file(m.key, m.path, parse_weight_format(f));
  o.weight_cache_stamp = {{"format", f}, {"files", files}};
}

double measure_gpu_read_bandwidth_gbs(const std::string& device) {
#ifdef KVAD_HAVE_VULKAN
  auto dev = vk::Device::open(device);
  // 1 GiB is far past any GPU's cache; a CPU driver (lavapipe) reads host memory, where 256 MiB do.
  const size_t bytes = std::min<size_t>(dev->info().cpu() ? size_t{256} << 20 : size_t{1} << 30,
                                        dev->info().memory_bytes / 4);
  return dev->measure_read_bandwidth(bytes);
#else
  (void)device;
  return 0;
#endif
}

std::string describe_devices() {
  std::string out = fmt::format("cpu     {}, {} threads, {:.1f} GiB  (--device cpu, the default)\n", cpu_summary(),
                                default_threads(), (double)meminfo_bytes("MemTotal") / (1ull << 30));
#ifdef KVAD_HAVE_VULKAN
  std::string why;
  std::vector<vk::DeviceInfo> devs = vk::list_devices(&why);
  if (devs.empty() && !why.empty()) return out + "gpu     none: " + why + "\n";
  if (devs.empty()) return out + "gpu     none: the Vulkan loader found no device\n";
  for (const vk::DeviceInfo& d : devs)
    out += fmt::format("gpu:{}   {} ({}, Vulkan {}, {:.1f} GiB, subgroup {}{}){}\n", d.index, d.name, d.type, d.api,
                       (double)d.memory_bytes / (1ull << 30), d.subgroup_size, d.subgroup_sums ? "" : " without sums",
                       d.cpu() ? "  - a CPU driver: used only when named, or with KVAD_VULKAN_ALLOW_CPU=1" : "");
#else
  out += "gpu     none: this kvad was built without the Vulkan backend (libvulkan-dev and glslc at build time)\n";
#endif
  return out;
}

}  // namespace kvad
