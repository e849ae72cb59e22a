// The server's log: a level, and one line per request with what the request cost. A request is
// served on one HTTP thread from routing to its last byte (streams included), so its figures are
// kept per thread: begun before routing, added to by the generation routes, printed by the logger.
#pragma once
#include <cstdint>
#include <string>

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace kvad::serve {

enum class LogLevel { Error, Warn, Info, Debug };
LogLevel parse_log_level(const std::string& name);  // error | warn | info | debug; throws naming the value

struct RequestFigures {
  int64_t prompt_tokens = -1;  // -1: the request generated nothing
  int64_t cached_tokens = 0;
  int64_t generated_tokens = 0;
  double decode_seconds = 0;
};

void begin_request();            // before routing: the clock starts, the figures clear
void end_request();              // after the log line: nothing carries over to the thread's next request
RequestFigures& this_request();  // the current thread's request

// "POST /v1/chat/completions 200 | prompt 12 tokens (8 cached), 64 generated | 1234 ms | 21.3 tok/s",
// or "" when `level` does not log it (polling and the UI's files are logged at debug only).
std::string request_log_line(const httplib::Request& req, const httplib::Response& res, LogLevel level);

}  // namespace kvad::serve
