#include "vulkan/profile.h"

#include <cstdlib>

#include <fmt/format.h>

#include "core/timing_table.h"

namespace kvad::vk {

DispatchProfile::DispatchProfile(VkDevice device, uint32_t timestamp_bits, float ns_per_tick)
    : device_(device), ns_per_tick_(ns_per_tick),
      mask_(timestamp_bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << timestamp_bits) - 1) {
  const char* e = std::getenv("KVAD_VULKAN_PROFILE");
  if (!e || !*e || std::string(e) == "0" || timestamp_bits == 0) return;
  VkQueryPoolCreateInfo qci{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
  qci.queryType = VK_QUERY_TYPE_TIMESTAMP;
  qci.queryCount = kMaxStamps;
  check(vkCreateQueryPool(device_, &qci, nullptr, &pool_), "vkCreateQueryPool");
  pending_.reserve(kMaxStamps);
}

DispatchProfile::~DispatchProfile() {
  if (pool_) vkDestroyQueryPool(device_, pool_, nullptr);
}

void DispatchProfile::begin(VkCommandBuffer cb) {
  if (!on()) return;
  vkCmdResetQueryPool(cb, pool_, 0, kMaxStamps);
  vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pool_, 0);
  stamps_ = 1;
  pending_.clear();
}

void DispatchProfile::mark(VkCommandBuffer cb, const char* name, uint32_t gx, uint32_t gy, uint32_t gz) {
  if (!on() || stamps_ >= kMaxStamps) return;  // a longer buffer's tail goes unprofiled
  vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pool_, stamps_++);
  pending_.emplace_back(name, gx, gy, gz);
}

void DispatchProfile::collect(double wall_s) {
  if (!on() || stamps_ == 0) return;
  std::vector<uint64_t> ticks(stamps_);
  check(vkGetQueryPoolResults(device_, pool_, 0, stamps_, ticks.size() * sizeof(uint64_t), ticks.data(),
                              sizeof(uint64_t), VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
        "vkGetQueryPoolResults");
  for (size_t i = 1; i < ticks.size(); i++) {
    const double ns = (double)((ticks[i] - ticks[i - 1]) & mask_) * ns_per_tick_;
    Total& t = totals_[pending_[i - 1]];
    t.calls++;
    t.ns += ns;
    gpu_ns_ += ns;
  }
  wall_s_ += wall_s;
  submits_++;
  stamps_ = 0;
}

std::string DispatchProfile::report() const {
  if (!on() || totals_.empty()) return "";
  std::vector<TimingRow> rows;
  for (const auto& [key, t] : totals_) {
    const auto& [name, gx, gy, gz] = key;
    rows.push_back({fmt::format("{} {}x{}x{}", name, gx, gy, gz), t.calls, t.ns / 1e9});
  }
  return fmt::format("Vulkan profile (KVAD_VULKAN_PROFILE): {} command buffers, GPU busy {:.1f} ms of {:.1f} ms the host waited\n",
                     submits_, gpu_ns_ / 1e6, wall_s_ * 1e3) +
         timing_table(std::move(rows), "command and grid");
}

}  // namespace kvad::vk
