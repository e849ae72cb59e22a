#include "serve/server.h"

#include "runtime/devices.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <cstdio>
#include <thread>

#include "core/cpu.h"
#include "core/meminfo.h"
#include "core/text.h"
#include "io/download.h"  // format_bytes
#include "core/threads.h"
#include "serve/server_impl.h"

namespace kvad::serve {

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string client_address(const ServeOptions& o, const httplib::Request& req) {
  if (std::find(o.trusted_proxies.begin(), o.trusted_proxies.end(), req.remote_addr) == o.trusted_proxies.end())
    return req.remote_addr;
  std::string xff = req.get_header_value("X-Forwarded-For");
  size_t comma = xff.rfind(',');
  std::string last = comma == std::string::npos ? xff : xff.substr(comma + 1);
  size_t b = last.find_first_not_of(" \t"), e = last.find_last_not_of(" \t");
  if (b == std::string::npos || e - b + 1 > 64) return req.remote_addr;  // no (or no plausible) address
  return last.substr(b, e - b + 1);
}

void reply_json(httplib::Response& res, const Json& j, int status) {
  res.status = status;
  res.set_content(dump(j), "application/json");
}

void reply_error(httplib::Response& res, const HttpError& e) {
  if (e.status == 429) res.set_header("Retry-After", "1");
  reply_json(res, error_json(e), e.status);
}

static EngineConfig engine_config(const ServeOptions& o) {
  EngineConfig c;
  c.ctx = o.ctx;
  c.parallel = o.parallel;
  c.max_choices = o.max_choices;
  c.queue = o.queue;
  c.kv_bytes = o.kv_bytes;
  c.step_tokens = o.step_tokens;
  c.kv_type = o.kv_type;
  c.device = o.device;
  c.device_memory = o.device_memory;
  c.snapshot_every = o.snapshot_every;
  c.snapshots = o.snapshots;
  c.speculative = o.speculative;
  c.loras = o.loras;
  c.load.format = parse_weight_format(o.quant.empty() ? "auto" : o.quant);  // auto | f32 | bf16 | q8 | q4
  c.load.copy_in_place_weights = !is_gpu_device(o.device);
  return c;
}

Server::Impl::Impl(ServeOptions o)
    : opts(std::move(o)), sched(engine_config(opts)), train(opts), pull(kvad_exe(opts.self_exe)) {
  TrainJobs::LoraHooks hooks;
  hooks.base_path = [this](const std::string& name) { return catalog_model_path(*this, name, "base"); };
  hooks.attach = [this](const std::string& name, const std::string& dir, const std::string& base,
                        const std::string& base_path) { return attach_trained_adapter(*this, name, dir, base, base_path); };
  train.set_lora_hooks(std::move(hooks));
}

// Every route but the UI's files and /health: the APIs (OpenAI's, Ollama's, the UI's own,
// llama-server's) all act or tell what the server holds.
static bool needs_key(const std::string& path) {
  for (const char* prefix : {"/v1/", "/api/", "/kvad/"})
    if (path.rfind(prefix, 0) == 0) return true;
  return path == "/metrics" || path == "/tokenize" || path == "/detokenize" || path == "/props" || path == "/slots" ||
         path == "/lora-adapters";
}

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

namespace {

// "example.com:8080" -> "example.com", "[::1]:80" -> "[::1]".
std::string host_part(const std::string& h) {
  if (!h.empty() && h[0] == '[') return ascii_lower(h.substr(0, h.find(']') + 1));
  return ascii_lower(h.substr(0, h.find(':')));
}

// Compares every byte whatever the first difference: the time taken says nothing about the key.
bool same_secret(const std::string& a, const std::string& b) {
  volatile unsigned char d = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); i++) d = d | ((unsigned char)a[i] ^ (unsigned char)(i < b.size() ? b[i] : 0));
  return d == 0;
}

bool state_changing(const std::string& m) { return m == "POST" || m == "PUT" || m == "PATCH" || m == "DELETE"; }

}  // namespace

// Whether the Host header names this server (DNS rebinding: a page on evil.example resolving
// to 127.0.0.1 sends Host: evil.example).
static bool host_allowed(const ServeOptions& o, const std::string& host_header) {
  std::string h = host_part(host_header);
  if (h.empty()) return false;
  for (const std::string& a : o.allowed_hosts)
    if (host_part(a) == h) return true;
  bool any = o.host == "0.0.0.0" || o.host == "::" || o.host.empty();
  if (any) return o.allowed_hosts.empty();
  std::string bound = o.host.find(':') != std::string::npos && o.host[0] != '[' ? "[" + o.host + "]" : o.host;
  if (h == ascii_lower(bound)) return true;
  return is_loopback_host(o.host) && (h == "localhost" || h == "127.0.0.1" || h == "[::1]");
}

static bool origin_allowed(const ServeOptions& o, const std::string& origin, const std::string& host_header) {
  for (const std::string& c : o.cors_origins)
    if (c == "*" || ascii_lower(c) == ascii_lower(origin)) return true;
  // Same origin: the page was served by this server under the Host the request names.
  // (https: behind a TLS-terminating proxy that keeps the Host.)
  return ascii_lower(origin) == "http://" + ascii_lower(host_header) || ascii_lower(origin) == "https://" + ascii_lower(host_header);
}

static bool cors_listed(const ServeOptions& o, const std::string& origin) {
  for (const std::string& c : o.cors_origins)
    if (c == "*" || ascii_lower(c) == ascii_lower(origin)) return true;
  return false;
}

// The Access-Control-Allow-Origin value: the origin itself when it is listed by name, "*" when only
// the wildcard admits it (a wildcard answer is never read with credentials by a browser, and
// kvad never sends Access-Control-Allow-Credentials).
static std::string cors_answer(const ServeOptions& o, const std::string& origin) {
  for (const std::string& c : o.cors_origins)
    if (ascii_lower(c) == ascii_lower(origin)) return origin;
  return "*";
}

Server::Server(ServeOptions opts) : impl_(std::make_unique<Impl>(std::move(opts))) {
  Impl& s = *impl_;
  GuardedHttp& h = s.http;
  int threads = std::max(4, s.opts.http_threads);
  h.set_payload_max_length(s.opts.max_body);
  h.set_tcp_nodelay(true);
  h.set_keep_alive_timeout(5);
  h.set_keep_alive_max_count(100);
  h.set_read_timeout((time_t)std::clamp(s.opts.request_seconds, 1.0, 30.0));
  h.set_write_timeout(30);
  GuardedHttp::Limits gl;
  gl.request_seconds = s.opts.request_seconds;
  gl.per_client = (size_t)std::max(1, std::min(s.opts.pending_per_client, threads / 2));
  gl.total_pending = (size_t)std::max(2, threads * 3 / 4);  // a quarter of the workers always free for requests
  h.set_guard_limits(gl, (size_t)threads);

  h.set_pre_routing_handler([&s](const httplib::Request& req, httplib::Response& res) {
    begin_request();
    auto refuse = [&](int status, const std::string& msg, const std::string& code) {
      res.set_header("Connection", "close");
      reply_error(res, HttpError(status, msg, "invalid_request_error", "", code));
      return httplib::Server::HandlerResponse::Handled;
    };
    uint64_t body = 0;
    if (req.has_header("Content-Length")) {
      try {
        body = std::stoull(req.get_header_value("Content-Length"));
      } catch (...) {
        return refuse(400, "bad Content-Length", "invalid_request");
      }
    }
    // The deadline grows with the declared body, but never past --max-body's worth (a larger
    // one gets 413): 2^64 bytes' worth of seconds overflowed the clock (UBSan in fuzz_http).
    GuardedHttp::headers_read(std::min<uint64_t>(body, s.opts.max_body));
    // Body limits hold for every framing: httplib bounds Content-Length bodies by --max-body but
    // reads a chunked body whole and inflates a gzip/deflate body without limit. Neither is
    // needed by an API client; both are refused before a byte of the body is read.
    if (req.has_header("Transfer-Encoding"))
      return refuse(411, "chunked request bodies are not accepted: send Content-Length", "length_required");
    if (req.has_header("Content-Encoding") && ascii_lower(req.get_header_value("Content-Encoding")) != "identity")
      return refuse(415, "compressed request bodies are not accepted", "unsupported_media_type");
    if (!host_allowed(s.opts, req.get_header_value("Host")))
      return refuse(421, "the Host header does not name this server (see --allow-host)", "misdirected_request");
    std::string origin = req.get_header_value("Origin");
    if (!origin.empty() && cors_listed(s.opts, origin)) {
      res.set_header("Access-Control-Allow-Origin", cors_answer(s.opts, origin));
      res.set_header("Vary", "Origin");
      if (req.method == "OPTIONS") {  // a preflight
        res.set_header("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
        res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
        res.set_header("Access-Control-Max-Age", "600");
        res.status = 204;
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    // Cross-site requests: a page elsewhere in the user's browser must not drive this server.
    // A browser names the page's origin on every cross-origin request; API clients send none.
    if (state_changing(req.method)) {
      if (!origin.empty() && !origin_allowed(s.opts, origin, req.get_header_value("Host")))
        return refuse(403, "cross-origin request refused (allow the origin with --cors ORIGIN)", "forbidden_origin");
      if (req.get_header_value("Sec-Fetch-Site") == "cross-site" && origin.empty())
        return refuse(403, "cross-site request refused", "forbidden_origin");
      std::string ct = ascii_lower(req.get_header_value("Content-Type"));
      if (body > 0 && ct.rfind("application/json", 0) != 0)
        return refuse(415, "request bodies must be JSON (Content-Type: application/json)", "unsupported_media_type");
    }
    if (!s.opts.api_key.empty() && needs_key(req.path) && req.method != "OPTIONS") {
      std::string auth = req.get_header_value("Authorization");
      const std::string prefix = "Bearer ";
      bool ok = auth.size() > prefix.size() && auth.compare(0, prefix.size(), prefix) == 0 &&
                same_secret(auth.substr(prefix.size()), s.opts.api_key);
      if (!ok) {
        reply_error(res, HttpError(401,
                                   auth.empty() ? "You didn't provide an API key: send 'Authorization: Bearer KEY'."
                                                : "Incorrect API key provided.",
                                   "invalid_request_error", "", "invalid_api_key"));
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Errors httplib itself produces (unknown route 404, body too large 413, ...) in OpenAI's shape.
  h.set_error_handler([&s](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string msg = res.status == 404   ? fmt::format("no such endpoint: {} {}", req.method, req.path)
                      : res.status == 413 ? fmt::format("the request body is larger than this server's limit of {} bytes",
                                                        s.opts.max_body)
                      : res.status == 405 ? "method not allowed"
                                          : fmt::format("HTTP {}", res.status);
    reply_json(res, error_json(msg, "invalid_request_error", "", res.status == 413 ? "payload_too_large" : ""), res.status);
  });
  h.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = std::string("internal error: ") + e.what();
    } catch (...) {
    }
    reply_json(res, error_json(what, "server_error"), 500);
  });
  h.set_logger([&s](const httplib::Request& req, const httplib::Response& res) {
    GuardedHttp::response_done();  // waiting for the connection's next request begins
    s.metrics.count_request(endpoint_label(req.method, req.path), res.status);
    if (std::string line = request_log_line(req, res, s.opts.log_level); !line.empty())
      std::fprintf(stderr, "kvad serve: %s\n", line.c_str());
    end_request();
  });

  h.Get("/health", [&s](const httplib::Request&, httplib::Response& res) {
    auto m = s.sched.model();
    reply_json(res, {{"status", s.stopping ? "shutting_down" : "ok"},
                     {"model", m ? Json(model_id(*m)) : Json(nullptr)},
                     {"busy", s.sched.in_flight() > 0},
                     {"auth_required", !s.opts.api_key.empty()}},
               s.stopping ? 503 : 200);
  });
  h.Get("/metrics", [&s](const httplib::Request&, httplib::Response& res) {
    res.set_content(s.metrics.prometheus(s.sched), "text/plain; version=0.0.4");
  });
  add_openai_routes(s);
  add_lora_routes(s);
  add_api_routes(s);
  add_ollama_routes(s);
  add_embedding_routes(s);
  add_llama_server_routes(s);
  add_ui_routes(s);
  add_image_routes(s);
}

Server::~Server() {
  stop();
}

namespace {
// Why binding failed, found by trying the same bind again: the errno httplib does not report.
std::string bind_failure(const std::string& host, int port) {
  addrinfo hints{}, *ai = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  int err = 0;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &ai) != 0 || !ai) {
    return fmt::format("cannot listen on {}:{}: '{}' is not an address or host name this machine knows", host, port, host);
  }
  int fd = ::socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
  int yes = 1;
  if (fd >= 0) ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  if (fd < 0 || ::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) err = errno;
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(ai);
  if (err == EADDRINUSE)
    return fmt::format("port {} is already in use on {} (another server is listening there): stop it or choose "
                       "another --port", port, host);
  if (err == EADDRNOTAVAIL) return fmt::format("cannot listen on {}:{}: {} is not an address of this machine", host, port, host);
  if (err == EACCES) return fmt::format("cannot listen on {}:{}: ports below 1024 need privileges", host, port);
  return fmt::format("cannot listen on {}:{}: {}", host, port, err ? std::strerror(err) : "the bind failed");
}
}  // namespace

// What was loaded at start, plus one default-size painting, must fit the budget: said now, with
// each part's size, rather than when the first large picture takes the process down.
static void check_memory_at_start(Server::Impl& s) {
  const MemoryBudget b = memory_budget(s);
  const size_t painting = s.images.default_working_bytes();
  if (!b.limit || b.language_model + b.images + painting <= b.limit) return;
  fail("--memory {}: the language model needs {} (weights and KV pool), the image models {}{}: {} in all. Give a "
       "larger --memory, a smaller --kv-memory or --quant{}",
       format_bytes(b.limit), format_bytes(b.language_model), format_bytes(b.images),
       painting ? fmt::format(", and painting at their default size {} more", format_bytes(painting)) : "",
       format_bytes(b.language_model + b.images + painting), s.images.empty() ? "" : ", or --image-quant q8");
}

int Server::start() {
  Impl& s = *impl_;
  if (!s.opts.model.empty()) s.sched.load_now(s.opts.model, s.opts.alias);
  s.images.load(s.opts.image_models, s.opts.image_base, parse_weight_format(s.opts.image_quant));
  if (s.opts.memory_bytes == 0) s.opts.memory_bytes = (size_t)(0.9 * (double)meminfo_bytes("MemTotal"));
  check_memory_at_start(s);
  if (s.opts.port == 0) {
    s.port = s.http.bind_to_any_port(s.opts.host);
    if (s.port <= 0) fail("cannot listen on {}: no free port", s.opts.host);
  } else {
    if (!s.http.bind_to_port(s.opts.host, s.opts.port)) fail("{}", bind_failure(s.opts.host, s.opts.port));
    s.port = s.opts.port;
  }
  s.http.set_port(s.port);
  s.serving_sweep.set_target(s.opts.host == "0.0.0.0" || s.opts.host == "::" ? "127.0.0.1" : s.opts.host, s.port,
                             s.opts.api_key);
  return s.port;
}

void Server::run() { impl_->http.listen_after_bind(); }

std::string Server::startup_summary() const {
  Impl& s = *impl_;
  std::string model = "no model loaded (load one from the UI's Models page)";
  if (auto m = s.sched.model())
    model = fmt::format("model {} ({}, {:.1f}M parameters, {}, {:.1f} MB of weights, loaded in {:.2f} s)", model_id(*m),
                        m->model->config().architecture, (double)m->model->parameter_count() / 1e6,
                        m->model->weight_format(), (double)m->model->weight_bytes() / 1e6, m->load_seconds);
  LiveStats& e = s.sched.stats();
  return fmt::format("{} | context {} | --parallel {}, --queue {} | KV pool {:.1f} MiB of {} ({} blocks of {}) | {} threads, {}",
                     model, e.context_length.load(), s.opts.parallel, s.opts.queue,
                     (double)e.kv_capacity_bytes.load() / (1 << 20), kernels::kv_type_name(s.opts.kv_type),
                     e.blocks_total.load(), e.block_size.load(), pool().size(), cpu_summary());
}

std::string Server::shutdown_summary() const {
  Metrics& m = impl_->metrics;
  return fmt::format("{} generations, {} prompt tokens ({} cached), {} generated, {} refused busy, {} client disconnects",
                     m.generations.load(), m.prompt_tokens.load(), m.cached_tokens.load(), m.completion_tokens.load(),
                     m.busy_rejections.load(), m.disconnects.load());
}

void Server::stop() {
  Impl& s = *impl_;
  if (s.stopped.exchange(true)) return;
  s.stopping = true;
  s.serving_sweep.cancel();
  s.train.cancel_all();
  s.pull.cancel();
  s.sched.shutdown(s.opts.shutdown_grace);  // streams end with their last chunk or an error event
  // httplib stops calling content providers once the listener is closed, so let every stream write
  // its last events and [DONE] first (bounded: a stuck client cannot hold the exit).
  for (int i = 0; i < 300 && s.metrics.streams_active.load() > 0; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  s.http.stop();
}

int Server::port() const { return impl_->port; }

}  // namespace kvad::serve
