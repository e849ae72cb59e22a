// HTTP(S) through libcurl: one request at a time, streaming bodies, timeouts, cancellation. The
// Hub client (hub.h) is the only user; nothing here knows about the Hub.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"

namespace kvad {

// Ctrl-C (or another stop request) ended the operation. The CLI exits 130 on it.
class Cancelled : public Error {
 public:
  using Error::Error;
};

// The request did not complete at the transport level (no HTTP status to judge).
class HttpError : public Error {
 public:
  enum class Kind { Connect, Timeout, Cut, Tls, Other };
  HttpError(Kind kind, const std::string& msg) : Error(msg), kind(kind) {}
  Kind kind;
  bool retryable() const { return kind == Kind::Timeout || kind == Kind::Cut; }
};

// Header names lower-cased; the headers of the final response only (after redirects).
using HttpHeaders = std::map<std::string, std::string>;

struct HttpRequest {
  std::string method = "GET";  // GET or HEAD
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  bool follow_redirects = false;
  double connect_timeout_s = 10;
  double total_timeout_s = 0;  // 0 = none (downloads use stall_timeout_s instead)
  double stall_timeout_s = 0;  // abort when no byte arrives for this long; 0 = off
  const std::atomic<bool>* cancel = nullptr;
  // Streaming: called once when the final response's headers are in (before any body byte), then
  // with each piece of the body. Without on_body the body is collected in HttpResponse::body.
  std::function<void(long status, const HttpHeaders& headers)> on_response;
  std::function<void(const char* data, size_t n)> on_body;
};

struct HttpResponse {
  long status = 0;
  HttpHeaders headers;
  std::string body;
  std::string effective_url;
  std::optional<std::string> header(const std::string& lower_name) const;
};

// Throws HttpError on transport failures, Cancelled when `cancel` became true, and rethrows what a
// callback threw. HTTP error statuses are returned, not thrown.
HttpResponse http_request(const HttpRequest& req);

// Percent-encodes for a URL path: keeps unreserved characters, and '/' unless encode_slash.
std::string url_encode(const std::string& s, bool encode_slash);
// scheme://host[:port] of a URL (lower-cased), for "is this the same site" checks.
std::string url_origin(const std::string& url);
// Resolves a Location header against the URL it came from.
std::string url_resolve(const std::string& base, const std::string& location);

}  // namespace kvad
