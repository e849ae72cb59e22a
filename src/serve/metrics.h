// Counters for /metrics (Prometheus text format) and the dashboard.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace kvad::serve {

class EngineThread;

class Metrics {
 public:
  // One finished HTTP request (endpoint is a route name, not the raw path).
  void count_request(const std::string& endpoint, int status);
  std::string prometheus(EngineThread& s) const;

  std::atomic<uint64_t> prompt_tokens{0}, completion_tokens{0}, cached_tokens{0};
  std::atomic<uint64_t> busy_rejections{0}, disconnects{0}, generations{0};
  std::atomic<int64_t> streams_active{0};
  std::atomic<double> decode_seconds{0}, prefill_seconds{0};
  std::atomic<uint64_t> prefill_tokens{0};

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
};

// Resident set size of this process (from /proc/self/statm), 0 when unknown.
size_t rss_bytes();
// The route name a path is counted under in /metrics.
std::string endpoint_label(const std::string& method, const std::string& path);

}  // namespace kvad::serve
