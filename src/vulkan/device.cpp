#include "vulkan/device.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <fmt/format.h>

#include "core/error.h"

// The SPIR-V of src/vulkan/shaders/*.comp, embedded by CMakeLists.txt (.incbin), in Shader order.
extern "C" const unsigned char kvad_spv_matmul[], kvad_spv_matmul_end[], kvad_spv_get_rows[], kvad_spv_get_rows_end[],
    kvad_spv_eltwise[], kvad_spv_eltwise_end[], kvad_spv_norm[], kvad_spv_norm_end[], kvad_spv_rope[],
    kvad_spv_rope_end[], kvad_spv_kv_store[], kvad_spv_kv_store_end[], kvad_spv_attention[], kvad_spv_attention_end[],
    kvad_spv_matvec[], kvad_spv_matvec_end[], kvad_spv_matmul_tiled[], kvad_spv_matmul_tiled_end[],
    kvad_spv_read_probe[], kvad_spv_read_probe_end[];

namespace kvad::vk {

namespace {

struct Spirv {
  const char* name;
  const unsigned char *begin, *end;
};
const Spirv kShaders[] = {
    {"matmul", kvad_spv_matmul, kvad_spv_matmul_end},       {"get_rows", kvad_spv_get_rows, kvad_spv_get_rows_end},
    {"eltwise", kvad_spv_eltwise, kvad_spv_eltwise_end},    {"norm", kvad_spv_norm, kvad_spv_norm_end},
    {"rope", kvad_spv_rope, kvad_spv_rope_end},             {"kv_store", kvad_spv_kv_store, kvad_spv_kv_store_end},
    {"attention", kvad_spv_attention, kvad_spv_attention_end}, {"matvec", kvad_spv_matvec, kvad_spv_matvec_end},
    {"matmul_tiled", kvad_spv_matmul_tiled, kvad_spv_matmul_tiled_end},
    {"read_probe", kvad_spv_read_probe, kvad_spv_read_probe_end},
};
static_assert(sizeof kShaders / sizeof kShaders[0] == (size_t)Shader::Count);

constexpr uint32_t kPushBytes = 128;  // every device has at least this much push-constant room

const char* type_name(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    default: return "other";
  }
}

// One instance for the process, never destroyed: destroying it lets the loader unload the driver,
// and a driver's own allocations then show up as leaks of an unknown module that no sanitizer
// suppression can name (lavapipe under ASan). Devices come and go; the instance stays.
VkInstance create_instance(std::string* why) {
  static std::mutex mu;
  static VkInstance instance = VK_NULL_HANDLE;
  static std::string error;
  std::lock_guard<std::mutex> lock(mu);
  if (instance) return instance;
  if (!error.empty() || !load_library(&error)) {
    if (why) *why = error;
    return VK_NULL_HANDLE;
  }
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "kvad";
  app.apiVersion = VK_API_VERSION_1_2;
  VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ci.pApplicationInfo = &app;
  VkResult r = vkCreateInstance(&ci, nullptr, &instance);
  if (r != VK_SUCCESS) {
    instance = VK_NULL_HANDLE;
    error = fmt::format("vkCreateInstance failed ({}): no usable Vulkan driver", (int)r);
    if (why) *why = error;
    return VK_NULL_HANDLE;
  }
  load_instance_functions(instance);
  return instance;
}

std::vector<VkPhysicalDevice> physical_devices(VkInstance instance) {
  uint32_t n = 0;
  check(vkEnumeratePhysicalDevices(instance, &n, nullptr), "vkEnumeratePhysicalDevices");
  std::vector<VkPhysicalDevice> out(n);
  check(vkEnumeratePhysicalDevices(instance, &n, out.data()), "vkEnumeratePhysicalDevices");
  out.resize(n);
  return out;
}

DeviceInfo describe(VkPhysicalDevice d, int index) {
  VkPhysicalDeviceProperties p;
  vkGetPhysicalDeviceProperties(d, &p);
  VkPhysicalDeviceMemoryProperties m;
  vkGetPhysicalDeviceMemoryProperties(d, &m);
  DeviceInfo info;
  info.index = index;
  info.name = p.deviceName;
  info.type = type_name(p.deviceType);
  info.shared_bytes = p.limits.maxComputeSharedMemorySize;
  for (uint32_t h = 0; h < m.memoryHeapCount; h++)
    if (m.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
      info.memory_bytes = std::max<uint64_t>(info.memory_bytes, m.memoryHeaps[h].size);
  info.api = fmt::format("{}.{}.{}", VK_API_VERSION_MAJOR(p.apiVersion), VK_API_VERSION_MINOR(p.apiVersion),
                         VK_API_VERSION_PATCH(p.apiVersion));
  if (p.apiVersion >= VK_API_VERSION_1_1) {
    VkPhysicalDeviceSubgroupProperties sub{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    p2.pNext = &sub;
    vkGetPhysicalDeviceProperties2(d, &p2);
    info.subgroup_size = sub.subgroupSize;
    info.subgroup_sums = (sub.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                         (sub.supportedOperations & VK_SUBGROUP_FEATURE_BASIC_BIT) &&
                         (sub.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
  }
  return info;
}


}  // namespace

// The products' kernel family for a device: KVAD_VULKAN_KERNELS=gpu|cpu, else a GPU's wherever
// the device is not a CPU driver and has subgroup sums.
static bool use_gpu_kernels(const DeviceInfo& info) {
  const char* e = std::getenv("KVAD_VULKAN_KERNELS");
  const std::string want = e ? e : "";
  if (want.empty()) return !info.cpu() && info.subgroup_sums;
  if (want != "gpu" && want != "cpu") fail("KVAD_VULKAN_KERNELS={}: expected gpu or cpu", want);
  if (want == "gpu" && !info.subgroup_sums)
    fail("KVAD_VULKAN_KERNELS=gpu: {} has no subgroup arithmetic in compute shaders, which the GPU kernels need",
         info.name);
  return want == "gpu";
}

bool allow_cpu_devices() {
  const char* e = std::getenv("KVAD_VULKAN_ALLOW_CPU");
  return e && *e && std::string(e) != "0";
}

std::vector<DeviceInfo> list_devices(std::string* why) {
  VkInstance instance = create_instance(why);
  if (!instance) return {};
  std::vector<DeviceInfo> out;
  int i = 0;
  for (VkPhysicalDevice d : physical_devices(instance)) out.push_back(describe(d, i++));
  return out;
}

Grid split_groups(uint64_t n) {
  if (n == 0) return {0, 1};
  const uint64_t x = std::min<uint64_t>(n, 65535);
  return {(uint32_t)x, (uint32_t)((n + x - 1) / x)};
}

std::unique_ptr<Device> Device::open(const std::string& spec) {
  std::string why;
  std::unique_ptr<Device> dev(new Device());
  dev->instance_ = create_instance(&why);
  if (!dev->instance_) fail("--device {}: {}", spec, why);
  std::vector<VkPhysicalDevice> all = physical_devices(dev->instance_);
  int chosen = -1;
  if (spec == "gpu") {
    for (size_t i = 0; i < all.size() && chosen < 0; i++)
      if (!describe(all[i], (int)i).cpu() || allow_cpu_devices()) chosen = (int)i;
    if (chosen < 0)
      fail("--device gpu: no Vulkan GPU found ({} device(s), all CPU drivers such as lavapipe: name one with "
           "--device gpu:N or set KVAD_VULKAN_ALLOW_CPU=1; `kvad devices` lists them)",
           all.size());
  } else if (spec.rfind("gpu:", 0) == 0) {
    char* end = nullptr;
    long n = std::strtol(spec.c_str() + 4, &end, 10);
    if (end == spec.c_str() + 4 || *end || n < 0 || n >= (long)all.size())
      fail("--device {}: there are {} Vulkan device(s) (gpu:0 .. gpu:{}; `kvad devices` lists them)", spec,
           all.size(), (long)all.size() - 1);
    chosen = (int)n;
  } else {
    fail("--device {}: expected cpu, gpu or gpu:N", spec);
  }
  dev->physical_ = all[(size_t)chosen];
  dev->info_ = describe(dev->physical_, chosen);

  VkPhysicalDeviceProperties props;
  vkGetPhysicalDeviceProperties(dev->physical_, &props);
  if (props.apiVersion < VK_API_VERSION_1_2)
    fail("--device {}: {} offers Vulkan {}; kvad needs 1.2 (buffer device addresses)", spec, dev->info_.name,
         dev->info_.api);
  for (int i = 0; i < 3; i++) dev->max_groups_[i] = props.limits.maxComputeWorkGroupCount[i];
  if (props.limits.maxPushConstantsSize < kPushBytes)
    fail("--device {}: {} has {} bytes of push constants, kvad needs {}", spec, dev->info_.name,
         props.limits.maxPushConstantsSize, kPushBytes);

  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  f2.pNext = &f12;
  vkGetPhysicalDeviceFeatures2(dev->physical_, &f2);
  if (!f12.bufferDeviceAddress || !f2.features.shaderInt64)
    fail("--device {}: {} lacks bufferDeviceAddress or shaderInt64, which kvad's shaders need", spec,
         dev->info_.name);

  uint32_t nq = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(dev->physical_, &nq, nullptr);
  std::vector<VkQueueFamilyProperties> qf(nq);
  vkGetPhysicalDeviceQueueFamilyProperties(dev->physical_, &nq, qf.data());
  int family = -1;
  for (uint32_t i = 0; i < nq && family < 0; i++)
    if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) family = (int)i;
  if (family < 0) fail("--device {}: {} has no compute queue", spec, dev->info_.name);
  dev->queue_family_ = (uint32_t)family;

  float priority = 1.0f;
  VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qci.queueFamilyIndex = dev->queue_family_;
  qci.queueCount = 1;
  qci.pQueuePriorities = &priority;
  VkPhysicalDeviceVulkan12Features want12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  want12.bufferDeviceAddress = VK_TRUE;
  VkPhysicalDeviceFeatures2 want{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  want.pNext = &want12;
  want.features.shaderInt64 = VK_TRUE;
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  dci.pNext = &want;
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  check(vkCreateDevice(dev->physical_, &dci, nullptr, &dev->device_), "vkCreateDevice");
  load_device_functions(dev->device_);
  vkGetDeviceQueue(dev->device_, dev->queue_family_, 0, &dev->queue_);
  vkGetPhysicalDeviceMemoryProperties(dev->physical_, &dev->memory_);

  VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pci.queueFamilyIndex = dev->queue_family_;
  check(vkCreateCommandPool(dev->device_, &pci, nullptr, &dev->pool_), "vkCreateCommandPool");
  VkCommandBufferAllocateInfo cai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  cai.commandPool = dev->pool_;
  cai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  cai.commandBufferCount = 1;
  check(vkAllocateCommandBuffers(dev->device_, &cai, &dev->main_), "vkAllocateCommandBuffers");
  check(vkAllocateCommandBuffers(dev->device_, &cai, &dev->side_), "vkAllocateCommandBuffers");
  VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  check(vkCreateFence(dev->device_, &fci, nullptr, &dev->fence_), "vkCreateFence");

  dev->gpu_kernels_ = use_gpu_kernels(dev->info_);
  dev->profile_ = std::make_unique<DispatchProfile>(dev->device_, qf[(size_t)family].timestampValidBits,
                                                    props.limits.timestampPeriod);

  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushBytes};
  VkPipelineLayoutCreateInfo lci{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  lci.pushConstantRangeCount = 1;
  lci.pPushConstantRanges = &range;
  check(vkCreatePipelineLayout(dev->device_, &lci, nullptr, &dev->layout_), "vkCreatePipelineLayout");
  for (const Spirv& s : kShaders) {
    const Shader which = (Shader)dev->pipelines_.size();
    if ((which == Shader::Matvec && !dev->info_.subgroup_sums) ||  // its SPIR-V needs them
        (which == Shader::MatmulTiled && dev->info_.shared_bytes < kTiledSharedBytes)) {
      dev->pipelines_.push_back(VK_NULL_HANDLE);  // never dispatched: gpu_kernels() / tiled_products() say so
      continue;
    }
    VkShaderModuleCreateInfo sci{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    sci.codeSize = (size_t)(s.end - s.begin);
    sci.pCode = reinterpret_cast<const uint32_t*>(s.begin);
    VkShaderModule module;
    check(vkCreateShaderModule(dev->device_, &sci, nullptr, &module), "vkCreateShaderModule");
    VkComputePipelineCreateInfo cpi{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
    cpi.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
    cpi.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    cpi.stage.module = module;
    cpi.stage.pName = "main";
    cpi.layout = dev->layout_;
    VkPipeline pipeline;
    VkResult r = vkCreateComputePipelines(dev->device_, VK_NULL_HANDLE, 1, &cpi, nullptr, &pipeline);
    vkDestroyShaderModule(dev->device_, module, nullptr);
    if (r != VK_SUCCESS) fail("Vulkan: compiling shader {} for {} failed ({})", s.name, dev->info_.name, (int)r);
    dev->pipelines_.push_back(pipeline);
  }
  return dev;
}

Device::~Device() {
  if (device_) {
    vkDeviceWaitIdle(device_);
    if (profile_) std::fputs(profile_report().c_str(), stderr);
    profile_.reset();
    for (VkPipeline p : pipelines_)
      if (p) vkDestroyPipeline(device_, p, nullptr);
    if (layout_) vkDestroyPipelineLayout(device_, layout_, nullptr);
    if (fence_) vkDestroyFence(device_, fence_, nullptr);
    if (pool_) vkDestroyCommandPool(device_, pool_, nullptr);
    vkDestroyDevice(device_, nullptr);
  }
}

uint32_t Device::memory_type(uint32_t allowed, bool host_visible) const {
  const VkMemoryPropertyFlags want = host_visible ? VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
                                                  : VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
  for (uint32_t i = 0; i < memory_.memoryTypeCount; i++)
    if ((allowed & (1u << i)) && (memory_.memoryTypes[i].propertyFlags & want) == want) return i;
  fail("Vulkan: {} has no {} memory for a buffer", info_.name, host_visible ? "host-visible" : "device-local");
}

Buffer Device::allocate(size_t bytes, bool host_visible) {
  Buffer b;
  b.size = std::max<size_t>(bytes, 16);
  VkBufferCreateInfo bci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bci.size = b.size;
  bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT |
              VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  check(vkCreateBuffer(device_, &bci, nullptr, &b.buffer), "vkCreateBuffer");
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(device_, b.buffer, &req);
  VkMemoryAllocateFlagsInfo flags{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO};
  flags.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
  VkMemoryAllocateInfo mai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  mai.pNext = &flags;
  mai.allocationSize = req.size;
  mai.memoryTypeIndex = memory_type(req.memoryTypeBits, host_visible);
  VkResult r = vkAllocateMemory(device_, &mai, nullptr, &b.memory);
  if (r != VK_SUCCESS) {
    vkDestroyBuffer(device_, b.buffer, nullptr);
    fail("Vulkan: allocating {:.1f} MiB on {} failed ({}; {:.1f} MiB allocated already)", (double)bytes / (1 << 20),
         info_.name, r == VK_ERROR_OUT_OF_DEVICE_MEMORY ? "out of device memory" : "error", (double)allocated_ / (1 << 20));
  }
  check(vkBindBufferMemory(device_, b.buffer, b.memory, 0), "vkBindBufferMemory");
  VkBufferDeviceAddressInfo ai{VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO};
  ai.buffer = b.buffer;
  b.address = vkGetBufferDeviceAddress(device_, &ai);
  if (host_visible) {
    void* p = nullptr;
    check(vkMapMemory(device_, b.memory, 0, VK_WHOLE_SIZE, 0, &p), "vkMapMemory");
    b.mapped = static_cast<uint8_t*>(p);
  }
  allocated_ += req.size;
  return b;
}

void Device::release(Buffer& b) {
  if (!b.buffer) return;
  vkDestroyBuffer(device_, b.buffer, nullptr);
  vkFreeMemory(device_, b.memory, nullptr);  // unmaps too
  allocated_ -= std::min(allocated_, b.size);
  b = Buffer{};
}

VkCommandBuffer Device::recording() {
  if (!recording_) {
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    check(vkBeginCommandBuffer(main_, &bi), "vkBeginCommandBuffer");
    recording_ = true;
    profile_->begin(main_);
  }
  return main_;
}

// Every command waits for everything before it: the forward is a chain of dependent steps, and
// finer tracking would buy little next to one barrier per dispatch.
void Device::barrier(VkCommandBuffer cb) {
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                     VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_HOST_READ_BIT;
  const VkPipelineStageFlags stages =
      VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
  vkCmdPipelineBarrier(cb, stages, stages | VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
}

void Device::dispatch(Shader s, const void* push, size_t push_bytes, uint32_t gx, uint32_t gy, uint32_t gz) {
  if (gx == 0 || gy == 0 || gz == 0) return;
  if (push_bytes > kPushBytes) fail("Vulkan: {} push constants of {} bytes > {}", kShaders[(int)s].name, push_bytes, kPushBytes);
  if (gx > max_groups_[0] || gy > max_groups_[1] || gz > max_groups_[2])
    fail("Vulkan: {} grid {}x{}x{} exceeds {}'s limits", kShaders[(int)s].name, gx, gy, gz, info_.name);
  VkCommandBuffer cb = recording();
  vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipelines_[(size_t)s]);
  vkCmdPushConstants(cb, layout_, VK_SHADER_STAGE_COMPUTE_BIT, 0, (uint32_t)((push_bytes + 3) & ~size_t{3}), push);
  vkCmdDispatch(cb, gx, gy, gz);
  barrier(cb);
  profile_->mark(cb, kShaders[(int)s].name, gx, gy, gz);
}

void Device::copy(const Buffer& src, size_t src_offset, const Buffer& dst, size_t dst_offset, size_t bytes) {
  if (bytes == 0) return;
  VkCommandBuffer cb = recording();
  VkBufferCopy region{src_offset, dst_offset, bytes};
  vkCmdCopyBuffer(cb, src.buffer, dst.buffer, 1, &region);
  barrier(cb);
  profile_->mark(cb, "copy (KiB)", (uint32_t)(bytes >> 10), 1, 1);
}

void Device::run_and_wait(VkCommandBuffer cb) {
  check(vkEndCommandBuffer(cb), "vkEndCommandBuffer");
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cb;
  check(vkQueueSubmit(queue_, 1, &si, fence_), "vkQueueSubmit");
  check(vkWaitForFences(device_, 1, &fence_, VK_TRUE, UINT64_MAX), "vkWaitForFences");
  check(vkResetFences(device_, 1, &fence_), "vkResetFences");
  check(vkResetCommandBuffer(cb, 0), "vkResetCommandBuffer");
}

void Device::submit() {
  if (!recording_) return;
  recording_ = false;
  const auto t0 = std::chrono::steady_clock::now();
  run_and_wait(main_);
  profile_->collect(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

void Device::upload(const Buffer& dst, size_t offset, const void* data, size_t bytes) {
  if (bytes == 0) return;
  if (offset + bytes > dst.size) fail("Vulkan: upload of {} bytes at {} past a buffer of {}", bytes, offset, dst.size);
  if (dst.mapped) {
    std::memcpy(dst.mapped + offset, data, bytes);
    return;
  }
  // Through a staging buffer in slices, so a large weight never needs its size twice in host memory.
  const size_t slice = std::min<size_t>(bytes, size_t{64} << 20);
  Buffer staging = allocate(slice, true);
  for (size_t done = 0; done < bytes; done += slice) {
    const size_t n = std::min(slice, bytes - done);
    std::memcpy(staging.mapped, static_cast<const uint8_t*>(data) + done, n);
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    check(vkBeginCommandBuffer(side_, &bi), "vkBeginCommandBuffer");
    VkBufferCopy region{0, offset + done, n};
    vkCmdCopyBuffer(side_, staging.buffer, dst.buffer, 1, &region);
    barrier(side_);
    run_and_wait(side_);
  }
  release(staging);
}

double Device::measure_read_bandwidth(size_t bytes) {
  bytes = std::min<size_t>(bytes & ~size_t{15}, size_t{16} << 30);  // 16-byte units fit the shader's 32 bits
  struct Args {
    uint64_t src, sink;
    uint32_t quads;
  } a{};
  Buffer src = allocate(bytes, false), sink = allocate(16, false);
  VkCommandBuffer cb = recording();  // any bytes do; filled so that no page is left untouched
  vkCmdFillBuffer(cb, src.buffer, 0, VK_WHOLE_SIZE, 0x5a5a5a5au);
  barrier(cb);
  submit();
  a.src = src.address;
  a.sink = sink.address;
  a.quads = (uint32_t)(bytes / 16);
  const uint32_t groups = std::min<uint32_t>(max_groups_[0], 4096);
  double best = 0;
  for (int run = 0; run < 4; run++) {  // the first warms up (pipeline, clocks) and is not counted
    const int passes = 8;
    for (int i = 0; i < passes; i++) dispatch(Shader::ReadProbe, &a, sizeof a, groups);
    const auto t0 = std::chrono::steady_clock::now();
    submit();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (run > 0) best = std::max(best, (double)a.quads * 16 * passes / s / 1e9);
  }
  release(src);
  release(sink);
  return best;
}

}  // namespace kvad::vk
