// Reading a server-sent-event stream of JSON objects ("data: {...}\n\n"), as the serving
// benchmark's HTTP client (serving_bench.cpp) receives OpenAI streams. The server is outside
// input: each event is parsed with bounded depth and size, and one that does not parse is skipped.
#pragma once
#include <string>
#include <string_view>

#include "core/json.h"

namespace kvad::serve {

class SseJsonEvents {
 public:
  // Appends received bytes; calls on_event(const Json&) for each complete JSON event.
  template <typename F>
  void feed(const char* data, size_t len, F&& on_event) {
    buf_.append(data, len);
    size_t pos;
    while ((pos = buf_.find("\n\n")) != std::string::npos) {
      std::string ev = buf_.substr(0, pos);
      buf_.erase(0, pos + 2);
      if (ev.rfind("data: {", 0) != 0) continue;
      Json j;
      try {
        j = parse_json(std::string_view(ev).substr(6), "server event", JsonLimits{16, 1 << 20, 0});
      } catch (const std::exception&) {
        continue;
      }
      on_event(j);
    }
  }

 private:
  std::string buf_;
};

}  // namespace kvad::serve
