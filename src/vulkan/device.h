// One Vulkan device as kvad uses it: buffers reached by device address (no descriptor sets), one
// pipeline per compute shader (all sharing one push-constant layout), and one command buffer that
// collects a forward's dispatches until submit() runs them and waits.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "vulkan/loader.h"
#include "vulkan/profile.h"

namespace kvad::vk {

struct DeviceInfo {
  int index = 0;            // as `kvad devices` lists it and --device gpu:N names it
  std::string name;
  std::string type;         // discrete | integrated | virtual | cpu | other
  uint64_t memory_bytes = 0;  // the largest device-local heap
  std::string api;          // e.g. "1.3.230"
  uint32_t subgroup_size = 0;  // lanes of a subgroup in compute shaders
  bool subgroup_sums = false;  // compute shaders may use subgroup arithmetic (subgroupAdd)
  uint32_t shared_bytes = 0;   // shared memory a workgroup may have
  bool cpu() const { return type == "cpu"; }
};

// KVAD_VULKAN_ALLOW_CPU is set (and not "0"): `--device gpu` may take a CPU driver (lavapipe).
bool allow_cpu_devices();
// Every Vulkan device of the machine; empty with *why set when there is no loader or instance.
std::vector<DeviceInfo> list_devices(std::string* why);

struct Buffer {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  uint64_t address = 0;     // for shaders (buffer device address)
  uint8_t* mapped = nullptr;  // host-visible buffers only
  size_t size = 0;
};

// The compiled shaders (src/vulkan/shaders/*.comp), in the order shaders.cpp embeds them.
enum class Shader { Matmul, GetRows, Eltwise, Norm, Rope, KvStore, Attention, Matvec, MatmulTiled, ReadProbe, Count };

class Device {
 public:
  // "gpu": the first device that is not a CPU (lavapipe) unless KVAD_VULKAN_ALLOW_CPU=1;
  // "gpu:N": device N of list_devices(), whatever its type (naming it is asking for it).
  static std::unique_ptr<Device> open(const std::string& spec);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const DeviceInfo& info() const { return info_; }
  // Which kernels the products use: a GPU's (a subgroup per output row, shaders/matvec.comp) or a
  // CPU driver's (a thread per output column, matmul.comp: lavapipe turns subgroup operations and
  // barriers into coroutines). A GPU's by default on a GPU that has subgroup sums;
  // KVAD_VULKAN_KERNELS=gpu|cpu chooses (the tests run the GPU's on lavapipe that way).
  bool gpu_kernels() const { return gpu_kernels_; }
  // The GPU's tiled product for batches of input rows (matmul_tiled.comp) fits this device.
  bool tiled_products() const { return gpu_kernels_ && info_.shared_bytes >= kTiledSharedBytes; }
  static constexpr uint32_t kTiledSharedBytes = 2 * 64 * 33 * 4;  // matmul_tiled.comp's two tiles
  // Device-local (or, with host_visible, mapped and coherent) memory that shaders reach by address.
  Buffer allocate(size_t bytes, bool host_visible);
  void release(Buffer& b);
  // Bytes of device memory allocated now (weights, cache, scratch).
  size_t allocated_bytes() const { return allocated_; }

  // Recorded into the current command buffer; each is ordered after everything recorded before it.
  void dispatch(Shader s, const void* push, size_t push_bytes, uint32_t gx, uint32_t gy = 1, uint32_t gz = 1);
  void copy(const Buffer& src, size_t src_offset, const Buffer& dst, size_t dst_offset, size_t bytes);
  // GB/s the device's shaders read from its memory: the best of 3 timed runs of 8 passes over a
  // buffer of `bytes` (far past any cache), for the share of bandwidth a decode reaches.
  double measure_read_bandwidth(size_t bytes);
  // Runs what was recorded and waits for it (no-op when nothing was).
  void submit();
  // Writes host bytes into a buffer now (through a staging buffer unless it is mapped); runs in a
  // command buffer of its own, so it may come between recorded commands.
  void upload(const Buffer& dst, size_t offset, const void* data, size_t bytes);
  // KVAD_VULKAN_PROFILE's table so far (empty when it is off); printed to stderr at close.
  std::string profile_report() const { return profile_->report(); }

 private:
  Device() = default;
  VkCommandBuffer recording();
  void barrier(VkCommandBuffer cb);
  void run_and_wait(VkCommandBuffer cb);
  uint32_t memory_type(uint32_t allowed, bool host_visible) const;

  DeviceInfo info_;
  VkInstance instance_ = VK_NULL_HANDLE;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t queue_family_ = 0;
  VkPhysicalDeviceMemoryProperties memory_{};
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkCommandBuffer main_ = VK_NULL_HANDLE, side_ = VK_NULL_HANDLE;
  bool recording_ = false;
  VkFence fence_ = VK_NULL_HANDLE;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  std::vector<VkPipeline> pipelines_;
  size_t allocated_ = 0;
  bool gpu_kernels_ = false;
  uint32_t max_groups_[3] = {65535, 65535, 65535};
  std::unique_ptr<DispatchProfile> profile_;  // KVAD_VULKAN_PROFILE=1: per-command GPU times
};

// Splits n workgroups into (x, y) with x within the device limit: shaders compute their index as
// x + groups.x * y.
struct Grid {
  uint32_t x, y;
};
Grid split_groups(uint64_t n);

}  // namespace kvad::vk
