// Where a forward's GPU time goes, when KVAD_VULKAN_PROFILE=1: a timestamp after every dispatch
// and copy (each already ends in a barrier, so the difference of two neighbours is one command's
// time), summed per shader and grid, and printed to stderr when the device closes. A lent GPU is
// minutes of a session; one profiled run says which kernel to work on next.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "vulkan/loader.h"

namespace kvad::vk {

class DispatchProfile {
 public:
  // Off (and free) unless KVAD_VULKAN_PROFILE is set and not "0", and the queue keeps timestamps.
  DispatchProfile(VkDevice device, uint32_t timestamp_bits, float ns_per_tick);
  ~DispatchProfile();
  DispatchProfile(const DispatchProfile&) = delete;
  DispatchProfile& operator=(const DispatchProfile&) = delete;
  bool on() const { return pool_ != VK_NULL_HANDLE; }

  // A command buffer begins: resets the queries and stamps the start.
  void begin(VkCommandBuffer cb);
  // After a command (and its barrier): stamps its end under `name` and its grid.
  void mark(VkCommandBuffer cb, const char* name, uint32_t gx, uint32_t gy, uint32_t gz);
  // After the command buffer ran: reads the stamps into the totals; `wall_s` is how long the host
  // waited for it (recording excluded), so the table can say how busy the GPU was.
  void collect(double wall_s);
  // The table, largest total first.
  std::string report() const;

 private:
  struct Total {
    uint64_t calls = 0;
    double ns = 0;
  };
  using Key = std::tuple<const char*, uint32_t, uint32_t, uint32_t>;  // names are the shaders' static strings
  VkDevice device_;
  VkQueryPool pool_ = VK_NULL_HANDLE;
  float ns_per_tick_;
  uint64_t mask_;
  std::vector<Key> pending_;  // the label of stamp i + 1
  uint32_t stamps_ = 0;
  std::map<Key, Total> totals_;
  double wall_s_ = 0, gpu_ns_ = 0;
  uint64_t submits_ = 0;
  static constexpr uint32_t kMaxStamps = 16384;
};

}  // namespace kvad::vk
