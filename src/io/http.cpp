#include "io/http.h"

#include <curl/curl.h>

#include <cctype>
#include <chrono>
#include <exception>
#include <mutex>

#include "core/text.h"

namespace kvad {

namespace {

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) fail("libcurl: global initialisation failed");
  });
}

struct Transfer {
  const HttpRequest* req = nullptr;
  HttpResponse* resp = nullptr;
  long status = 0;
  HttpHeaders headers;
  bool started = false;  // on_response has been called
  std::exception_ptr error;
  CURL* curl = nullptr;
  curl_off_t last_bytes = -1;
  std::chrono::steady_clock::time_point last_change = std::chrono::steady_clock::now();
  bool stalled = false;

  void start() {
    if (started) return;
    started = true;
    resp->status = status;
    resp->headers = headers;
    if (req->on_response) req->on_response(status, headers);
  }
};

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t len = size * n;
  std::string line(data, len);
  if (line.rfind("HTTP/", 0) == 0) {  // a new response (the first, or one after a redirect)
    t->headers.clear();
    size_t sp = line.find(' ');
    t->status = sp == std::string::npos ? 0 : std::strtol(line.c_str() + sp + 1, nullptr, 10);
    return len;
  }
  size_t colon = line.find(':');
  if (colon == std::string::npos) return len;
  t->headers[trim_space(ascii_lower(line.substr(0, colon)))] = trim_space(line.substr(colon + 1));
  return len;
}

size_t on_write(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  size_t len = size * n;
  try {
    t->start();
    if (t->req->on_body) t->req->on_body(data, len);
    else t->resp->body.append(data, len);
  } catch (...) {
    t->error = std::current_exception();
    return len == 0 ? 1 : 0;  // any count other than len makes libcurl stop with CURLE_WRITE_ERROR
  }
  return len;
}

// Called by libcurl at least about once a second, also while no data moves: cancellation and the
// stall timeout are checked here.
int on_progress(void* user, curl_off_t, curl_off_t dlnow, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  if (t->req->cancel && t->req->cancel->load()) return 1;
  auto now = std::chrono::steady_clock::now();
  if (dlnow != t->last_bytes) {
    t->last_bytes = dlnow;
    t->last_change = now;
  } else if (t->req->stall_timeout_s > 0 &&
             std::chrono::duration<double>(now - t->last_change).count() > t->req->stall_timeout_s) {
    t->stalled = true;
    return 1;
  }
  return 0;
}

HttpError::Kind classify(CURLcode rc) {
  switch (rc) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
      return HttpError::Kind::Connect;
    case CURLE_OPERATION_TIMEDOUT:
      return HttpError::Kind::Timeout;
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return HttpError::Kind::Cut;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CACERT_BADFILE:
      return HttpError::Kind::Tls;
    default:
      return HttpError::Kind::Other;
  }
}

struct CurlHandle {
  CURL* h = curl_easy_init();
  curl_slist* headers = nullptr;
  ~CurlHandle() {
    curl_slist_free_all(headers);
    if (h) curl_easy_cleanup(h);
  }
};

}  // namespace

std::optional<std::string> HttpResponse::header(const std::string& lower_name) const {
  auto it = headers.find(lower_name);
  if (it == headers.end()) return std::nullopt;
  return it->second;
}

HttpResponse http_request(const HttpRequest& req) {
  global_init();
  CurlHandle c;
  if (!c.h) fail("libcurl: cannot create a handle");
  HttpResponse resp;
  Transfer t;
  t.req = &req;
  t.resp = &resp;
  t.curl = c.h;
  char errbuf[CURL_ERROR_SIZE] = {0};

  curl_easy_setopt(c.h, CURLOPT_URL, req.url.c_str());
  curl_easy_setopt(c.h, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(c.h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c.h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c.h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c.h, CURLOPT_USERAGENT, "kvad/0.1.0 (libcurl/" LIBCURL_VERSION ")");
  if (req.method == "HEAD") curl_easy_setopt(c.h, CURLOPT_NOBODY, 1L);
  else if (req.method != "GET") fail("http: unsupported method {}", req.method);
  curl_easy_setopt(c.h, CURLOPT_FOLLOWLOCATION, req.follow_redirects ? 1L : 0L);
  curl_easy_setopt(c.h, CURLOPT_MAXREDIRS, 10L);
  // Credentials go only to the host they were meant for (libcurl drops a custom Authorization header
  // when a redirect leaves the original host and port); the Hub client also never sets one for a
  // different host.
  curl_easy_setopt(c.h, CURLOPT_UNRESTRICTED_AUTH, 0L);
  curl_easy_setopt(c.h, CURLOPT_CONNECTTIMEOUT_MS, (long)(req.connect_timeout_s * 1000));
  if (req.total_timeout_s > 0) curl_easy_setopt(c.h, CURLOPT_TIMEOUT_MS, (long)(req.total_timeout_s * 1000));
  for (const std::string& h : req.headers) c.headers = curl_slist_append(c.headers, h.c_str());
  // Sizes and hashes are of the bytes as stored: ask for no content coding.
  c.headers = curl_slist_append(c.headers, "Accept-Encoding: identity");
  curl_easy_setopt(c.h, CURLOPT_HTTPHEADER, c.headers);
  curl_easy_setopt(c.h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c.h, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(c.h, CURLOPT_WRITEFUNCTION, on_write);
  curl_easy_setopt(c.h, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(c.h, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(c.h, CURLOPT_XFERINFODATA, &t);
  curl_easy_setopt(c.h, CURLOPT_NOPROGRESS, 0L);

  CURLcode rc = curl_easy_perform(c.h);
  if (t.error) std::rethrow_exception(t.error);
  if (rc == CURLE_ABORTED_BY_CALLBACK && req.cancel && req.cancel->load()) throw Cancelled("interrupted");
  if (rc == CURLE_ABORTED_BY_CALLBACK && t.stalled)
    throw HttpError(HttpError::Kind::Timeout,
                    fmt::format("{}: no data for {} s", req.url, req.stall_timeout_s));
  if (rc != CURLE_OK) {
    std::string detail = errbuf[0] ? errbuf : curl_easy_strerror(rc);
    throw HttpError(classify(rc), fmt::format("{}: {}", req.url, detail));
  }
  long code = 0;
  curl_easy_getinfo(c.h, CURLINFO_RESPONSE_CODE, &code);
  t.status = code ? code : t.status;
  t.start();  // a response without a body still reports its headers
  resp.status = t.status;
  char* eff = nullptr;
  curl_easy_getinfo(c.h, CURLINFO_EFFECTIVE_URL, &eff);
  if (eff) resp.effective_url = eff;
  return resp;
}

std::string url_encode(const std::string& s, bool encode_slash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (c == '/' && !encode_slash)) {
      out.push_back((char)c);
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

std::string url_origin(const std::string& url) {
  size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) return "";
  size_t host_end = url.find_first_of("/?#", scheme_end + 3);
  std::string o = ascii_lower(url.substr(0, host_end));
  // An explicit default port names the same origin as none.
  if (o.rfind("https://", 0) == 0 && o.size() > 4 && o.substr(o.size() - 4) == ":443") o.resize(o.size() - 4);
  if (o.rfind("http://", 0) == 0 && o.size() > 3 && o.substr(o.size() - 3) == ":80") o.resize(o.size() - 3);
  return o;
}

std::string url_resolve(const std::string& base, const std::string& location) {
  if (location.find("://") != std::string::npos) return location;
  if (location.rfind("//", 0) == 0) return base.substr(0, base.find("://") + 1) + location;
  std::string origin;
  size_t scheme_end = base.find("://");
  size_t host_end = base.find_first_of("/?#", scheme_end == std::string::npos ? 0 : scheme_end + 3);
  origin = base.substr(0, host_end);
  if (!location.empty() && location[0] == '/') return origin + location;
  std::string path = host_end == std::string::npos ? "/" : base.substr(host_end);
  path = path.substr(0, path.find_first_of("?#"));
  path = path.substr(0, path.rfind('/') + 1);
  return origin + path + location;
}

}  // namespace kvad
