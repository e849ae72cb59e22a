#include "serve/request_log.h"

#include <httplib.h>

#include <chrono>

#include "core/error.h"

namespace kvad::serve {

namespace {
using Clock = std::chrono::steady_clock;
thread_local RequestFigures t_figures;
thread_local Clock::time_point t_start{};

// What a browser tab or a monitor asks for every second or two: noise at info.
bool is_polling(const httplib::Request& req) {
  if (req.method != "GET") return false;
  const std::string& p = req.path;
  return p == "/health" || p == "/metrics" || p == "/kvad/stats" || p == "/slots" || p == "/kvad/models/loading" ||
         (p.rfind("/kvad/", 0) != 0 && p.rfind("/api/", 0) != 0 && p.rfind("/v1/", 0) != 0 && p != "/props");
}
}  // namespace

LogLevel parse_log_level(const std::string& name) {
  if (name == "error") return LogLevel::Error;
  if (name == "warn") return LogLevel::Warn;
  if (name == "info") return LogLevel::Info;
  if (name == "debug") return LogLevel::Debug;
  fail("--log-level: '{}' is not one of error, warn, info, debug", name.substr(0, 40));
}

void begin_request() {
  t_figures = RequestFigures{};
  t_start = Clock::now();
}

RequestFigures& this_request() { return t_figures; }

std::string request_log_line(const httplib::Request& req, const httplib::Response& res, LogLevel level) {
  bool failed = res.status >= 400;
  bool wanted = level >= LogLevel::Debug || (level >= LogLevel::Info && !is_polling(req)) ||
                (level >= LogLevel::Warn && res.status >= 500);
  if (!wanted) return "";
  std::string line = fmt::format("{} {} {}", req.method, req.path.substr(0, 200), res.status);
  const RequestFigures& f = t_figures;
  if (f.prompt_tokens >= 0)
    line += fmt::format(" | prompt {} tokens ({} cached), {} generated", f.prompt_tokens, f.cached_tokens, f.generated_tokens);
  if (t_start != Clock::time_point{})
    line += fmt::format(" | {:.0f} ms", std::chrono::duration<double, std::milli>(Clock::now() - t_start).count());
  if (f.generated_tokens > 0 && f.decode_seconds > 0) line += fmt::format(" | {:.1f} tok/s", f.generated_tokens / f.decode_seconds);
  if (level >= LogLevel::Debug)
    line += fmt::format(" | from {} | {} body bytes | {}", req.remote_addr, req.body.size(),
                        req.get_header_value("User-Agent").substr(0, 80));
  if (failed && level >= LogLevel::Debug && !res.body.empty() && res.body.size() < 400) line += " | " + res.body;
  return line;
}

void end_request() {
  t_start = Clock::time_point{};  // a request httplib refuses before routing gets no stale clock
  t_figures = RequestFigures{};
}

}  // namespace kvad::serve
