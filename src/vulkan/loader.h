// The Vulkan functions kvad calls, loaded at run time from libvulkan.so.1 (dlopen): a machine
// without a Vulkan loader still runs kvad on the CPU, and `--device gpu` there is an error that
// says what to install. One X-macro list drives the declarations and the loading.
#pragma once
#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <string>

namespace kvad::vk {

#define KVAD_VK_INSTANCE_FUNCTIONS(X)        \
  X(vkDestroyInstance)                       \
  X(vkEnumeratePhysicalDevices)              \
  X(vkGetPhysicalDeviceProperties)           \
  X(vkGetPhysicalDeviceFeatures2)            \
  X(vkGetPhysicalDeviceProperties2)          \
  X(vkGetPhysicalDeviceMemoryProperties)     \
  X(vkGetPhysicalDeviceQueueFamilyProperties) \
  X(vkCreateDevice)                          \
  X(vkGetDeviceProcAddr)

#define KVAD_VK_DEVICE_FUNCTIONS(X) \
  X(vkDestroyDevice)                \
  X(vkGetDeviceQueue)               \
  X(vkCreateBuffer)                 \
  X(vkDestroyBuffer)                \
  X(vkGetBufferMemoryRequirements)  \
  X(vkAllocateMemory)               \
  X(vkFreeMemory)                   \
  X(vkBindBufferMemory)             \
  X(vkMapMemory)                    \
  X(vkGetBufferDeviceAddress)       \
  X(vkCreateShaderModule)           \
  X(vkDestroyShaderModule)          \
  X(vkCreatePipelineLayout)         \
  X(vkDestroyPipelineLayout)        \
  X(vkCreateComputePipelines)       \
  X(vkDestroyPipeline)              \
  X(vkCreateCommandPool)            \
  X(vkDestroyCommandPool)           \
  X(vkAllocateCommandBuffers)       \
  X(vkBeginCommandBuffer)           \
  X(vkEndCommandBuffer)             \
  X(vkResetCommandBuffer)           \
  X(vkCmdBindPipeline)              \
  X(vkCmdPushConstants)             \
  X(vkCmdDispatch)                  \
  X(vkCmdPipelineBarrier)           \
  X(vkCmdCopyBuffer)                \
  X(vkCmdFillBuffer)                \
  X(vkQueueSubmit)                  \
  X(vkCreateFence)                  \
  X(vkDestroyFence)                 \
  X(vkWaitForFences)                \
  X(vkResetFences)                  \
  X(vkDeviceWaitIdle)               \
  X(vkCreateQueryPool)              \
  X(vkDestroyQueryPool)             \
  X(vkCmdResetQueryPool)            \
  X(vkCmdWriteTimestamp)            \
  X(vkGetQueryPoolResults)

#define KVAD_VK_DECLARE(name) extern PFN_##name name;
KVAD_VK_INSTANCE_FUNCTIONS(KVAD_VK_DECLARE)
KVAD_VK_DEVICE_FUNCTIONS(KVAD_VK_DECLARE)
extern PFN_vkCreateInstance vkCreateInstance;
#undef KVAD_VK_DECLARE

// Opens libvulkan.so.1 once; false (with the reason in *why) when there is no loader.
bool load_library(std::string* why);
void load_instance_functions(VkInstance instance);
void load_device_functions(VkDevice device);

// Throws "Vulkan: <what> failed: VK_ERROR_..." unless r is VK_SUCCESS.
void check(VkResult r, const char* what);

}  // namespace kvad::vk
