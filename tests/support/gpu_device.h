// The Vulkan device the GPU tests run on: KVAD_TEST_DEVICE (e.g. gpu:1), else the first device the
// loader lists (lavapipe in CI). With no device the tests are skipped, saying why, and fail instead
// under KVAD_REQUIRE_VULKAN=1, which scripts/test.sh sets: CI must never pass them by skipping.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "runtime/devices.h"

namespace kvad::test {

inline std::string gpu_device(std::string* why) {
  if (const char* e = std::getenv("KVAD_TEST_DEVICE"); e && *e) return e;
  auto devs = list_gpu_devices(why);
  if (devs.empty()) return "";
  return devs[0].spec;
}

// The products' kernel family for the devices opened in its scope (KVAD_VULKAN_KERNELS): "gpu"
// (a subgroup per output row, what real GPUs run) or "cpu" (what lavapipe runs by default). The
// tests run both on lavapipe, so the GPU's kernels are checked on every commit without a GPU.
class ScopedKernels {
 public:
  explicit ScopedKernels(const char* family) { setenv("KVAD_VULKAN_KERNELS", family, 1); }
  ~ScopedKernels() { unsetenv("KVAD_VULKAN_KERNELS"); }
  ScopedKernels(const ScopedKernels&) = delete;
  ScopedKernels& operator=(const ScopedKernels&) = delete;
};
inline constexpr const char* kKernelFamilies[] = {"cpu", "gpu"};

}  // namespace kvad::test

#define KVAD_NEED_GPU(var)                                                                              \
  std::string var;                                                                                      \
  {                                                                                                     \
    std::string why_;                                                                                   \
    var = kvad::test::gpu_device(&why_);                                                                \
    if (var.empty()) {                                                                                  \
      if (std::getenv("KVAD_REQUIRE_VULKAN")) FAIL() << "no Vulkan device (KVAD_REQUIRE_VULKAN=1): " << why_; \
      GTEST_SKIP() << "SKIPPED: no Vulkan device (install mesa-vulkan-drivers for lavapipe): " << why_;  \
    }                                                                                                   \
  }
