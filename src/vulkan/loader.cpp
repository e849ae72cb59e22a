#include "vulkan/loader.h"

#include <dlfcn.h>

#include <mutex>

#include "core/error.h"

namespace kvad::vk {

#define KVAD_VK_DEFINE(name) PFN_##name name = nullptr;
KVAD_VK_INSTANCE_FUNCTIONS(KVAD_VK_DEFINE)
KVAD_VK_DEVICE_FUNCTIONS(KVAD_VK_DEFINE)
#undef KVAD_VK_DEFINE
PFN_vkCreateInstance vkCreateInstance = nullptr;

namespace {
PFN_vkGetInstanceProcAddr get_instance_proc = nullptr;
}

bool load_library(std::string* why) {
  static std::once_flag once;
  static std::string error;
  std::call_once(once, [] {
    void* lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      error = "no Vulkan loader (libvulkan.so.1) on this machine: install libvulkan1 and a driver "
              "(mesa-vulkan-drivers, or the GPU vendor's)";
      return;
    }
    get_instance_proc = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib, "vkGetInstanceProcAddr"));
    if (!get_instance_proc) {
      error = "libvulkan.so.1 has no vkGetInstanceProcAddr";
      return;
    }
    vkCreateInstance = reinterpret_cast<PFN_vkCreateInstance>(get_instance_proc(nullptr, "vkCreateInstance"));
    if (!vkCreateInstance) error = "libvulkan.so.1 has no vkCreateInstance";
  });
  if (!error.empty() && why) *why = error;
  return error.empty();
}

void load_instance_functions(VkInstance instance) {
#define KVAD_VK_LOAD(name)                                                                  \
  name = reinterpret_cast<PFN_##name>(get_instance_proc(instance, #name));                  \
  if (!name) fail("Vulkan: the loader has no {}", #name);
  KVAD_VK_INSTANCE_FUNCTIONS(KVAD_VK_LOAD)
#undef KVAD_VK_LOAD
}

void load_device_functions(VkDevice device) {
#define KVAD_VK_LOAD(name)                                                      \
  name = reinterpret_cast<PFN_##name>(vkGetDeviceProcAddr(device, #name));      \
  if (!name) fail("Vulkan: the device has no {}", #name);
  KVAD_VK_DEVICE_FUNCTIONS(KVAD_VK_LOAD)
#undef KVAD_VK_LOAD
}

namespace {
const char* result_name(VkResult r) {
  switch (r) {
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY (the GPU's memory is full)";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    default: return "a Vulkan error";
  }
}
}  // namespace

void check(VkResult r, const char* what) {
  if (r != VK_SUCCESS) fail("Vulkan: {} failed: {} ({})", what, result_name(r), (int)r);
}

}  // namespace kvad::vk
