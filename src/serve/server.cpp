#include "serve/server.h"

#include <chrono>
#include <cstdio>
#include <thread>

#include "serve/server_impl.h"

namespace kvad::serve {

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

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
  c.queue = o.queue;
  c.kv_bytes = o.kv_bytes;
  c.load.format = parse_weight_format(o.quant.empty() ? "auto" : o.quant);  // auto | f32 | bf16 | q8 | q4
  return c;
}

Server::Impl::Impl(ServeOptions o)
    : opts(std::move(o)), sched(engine_config(opts)), train(opts), pull(kvad_exe(opts.self_exe)) {}

static bool needs_key(const std::string& path) {
  return path.rfind("/v1/", 0) == 0 || path.rfind("/api/", 0) == 0 || path == "/metrics";
}

Server::Server(ServeOptions opts) : impl_(std::make_unique<Impl>(std::move(opts))) {
  Impl& s = *impl_;
  httplib::Server& h = s.http;
  int threads = std::max(4, s.opts.http_threads);
  h.new_task_queue = [threads] { return new httplib::ThreadPool((size_t)threads); };
  h.set_payload_max_length(s.opts.max_body);
  h.set_tcp_nodelay(true);
  h.set_keep_alive_timeout(5);
  h.set_read_timeout(30);
  h.set_write_timeout(30);

  h.set_pre_routing_handler([&s](const httplib::Request& req, httplib::Response& res) {
    if (!s.opts.api_key.empty() && needs_key(req.path) && req.method != "OPTIONS") {
      std::string auth = req.get_header_value("Authorization");
      const std::string prefix = "Bearer ";
      bool ok = auth.size() > prefix.size() && auth.compare(0, prefix.size(), prefix) == 0 &&
                auth.substr(prefix.size()) == s.opts.api_key;
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
    s.metrics.count_request(endpoint_label(req.method, req.path), res.status);
    if (!s.opts.quiet && (req.path.rfind("/v1/", 0) == 0 || res.status >= 400))
      std::fprintf(stderr, "kvad serve: %s %s -> %d\n", req.method.c_str(), req.path.c_str(), res.status);
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
  add_api_routes(s);
  add_ui_routes(s);
}

Server::~Server() {
  stop();
}

int Server::start() {
  Impl& s = *impl_;
  if (!s.opts.model.empty()) s.sched.load_now(s.opts.model);
  if (s.opts.port == 0) {
    s.port = s.http.bind_to_any_port(s.opts.host);
    if (s.port <= 0) fail("cannot listen on {}: no free port", s.opts.host);
  } else {
    if (!s.http.bind_to_port(s.opts.host, s.opts.port))
      fail("cannot listen on {}:{} (in use, or not an address of this machine)", s.opts.host, s.opts.port);
    s.port = s.opts.port;
  }
  s.load_runner.set_target(s.opts.host == "0.0.0.0" || s.opts.host == "::" ? "127.0.0.1" : s.opts.host, s.port,
                           s.opts.api_key);
  return s.port;
}

void Server::run() { impl_->http.listen_after_bind(); }

void Server::stop() {
  Impl& s = *impl_;
  if (s.stopped.exchange(true)) return;
  s.stopping = true;
  s.load_runner.cancel();
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
