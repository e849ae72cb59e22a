// kvad serve: the HTTP server. OpenAI-compatible API under /v1, Ollama's under /api, llama-server's
// /tokenize /detokenize /props /slots, the web UI at / with its JSON API under /kvad, /health and
// /metrics. Built on cpp-httplib (a blocking thread-per-connection pool; see
// docs/server.md for why), with one engine thread behind a EngineThread.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "runtime/speculative.h"
#include "serve/request_log.h"

namespace kvad::serve {

struct ServeOptions {
  std::string model;                   // loaded at start ("" = none until the UI loads one)
  std::string host = "127.0.0.1";
  int port = 8080;                     // 0 = any free port (tests)
  std::string api_key;                 // when set, every route but the UI files and /health needs "Authorization: Bearer KEY"
  int64_t ctx = 0;                     // cap on the context (0 = the model's)
  std::string quant = "auto";          // weight format in memory: auto | f32 | bf16 | q8 | q4
  std::vector<std::string> model_dirs; // folders whose sub-folders are models (besides the store)
  size_t max_body = 32u << 20;         // request bodies above this get 413
  int http_threads = 32;               // connections served at once
  int parallel = 4;                    // sequences decoding together (continuous batching)
  int queue = 64;                      // requests waiting beyond those; 429 past this
  int max_choices = 8;                 // cap on a request's n (also at most --parallel)
  size_t kv_bytes = 0;                 // KV block pool budget (0 = context x parallel)
  int64_t step_tokens = 256;           // rows per engine step (decodes + prefill chunks)
  kernels::KvType kv_type = kernels::KvType::F32;  // what the KV cache stores per position
  std::string device = "cpu";                       // --device: where models run (runtime/devices.h)
  size_t device_memory = 0;                         // --gpu-memory: what kvad may fill of the GPU's (0 = all)
  int64_t snapshot_every = -1, snapshots = -1;     // recurrent models' state snapshots (EngineOptions)
  std::vector<std::string> loras;  // --lora PATH[:SCALE]: adapters for the model loaded at start
  std::vector<std::string> image_models;  // --image-model NAME: text-to-image pipelines (serve/images.h)
  std::string image_base;                 // --image-base: the diffusers folder single-file image models take configs from
  std::string image_quant = "f32";        // --image-quant: f32, bf16 or q8 (image::PartFormats)
  size_t memory_bytes = 0;                // --memory: one budget for every model and painting (0: 90% of the machine's; serve/images.h)
  bool shared_prefix_cache = false;    // reuse cached prefixes across clients (default: per client address / cache_salt)
  // Addresses of front ends (nginx under `kvad cluster`) whose requests carry the real client in
  // X-Forwarded-For: from these, the client address is that header's last entry (the one the
  // proxy itself appended; the client can only write the entries before it).
  std::vector<std::string> trusted_proxies;
  double shutdown_grace = 3.0;         // seconds in-flight generations get to finish on SIGTERM
  std::string self_exe;                // the kvad binary (training jobs run it); "" = /proc/self/exe
  LogLevel log_level = LogLevel::Info; // stderr: info = start/stop + a line per request; debug adds polling
  // Browser-facing protection (issue 9). Host names (besides the bound address and, on loopback,
  // localhost / 127.0.0.1 / [::1]) a request's Host header may name: DNS rebinding. Bound to
  // 0.0.0.0 / :: with none given, any Host is accepted.
  std::vector<std::string> allowed_hosts;
  // Origins ("https://app.example") allowed to call the API from a browser: they get CORS
  // headers and may send state-changing requests. Other Origins get 403 on those.
  std::vector<std::string> cors_origins;
  SpeculativeConfig speculative;  // --draft / --spec (runtime/speculative.h)
  std::string alias;  // the id --model is served as (clients with a hard-coded model name)
  // Slow clients: seconds to send a whole request (headers + body; an idle keep-alive wait
  // counts), and pending connections per client address (see conn_guard.h).
  double request_seconds = 10;
  int pending_per_client = 8;
};

// Binding there exposes the server beyond this machine.
bool is_loopback_host(const std::string& host);

class Server {
 public:
  explicit Server(ServeOptions opts);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Loads the model (if any) and binds the port; returns the port bound. Throws on failure.
  int start();
  // Serves until stop(); returns when every connection is closed.
  void run();
  // From any thread (not a signal handler): refuse new work, let in-flight generations finish for
  // up to shutdown_grace seconds, cut the rest with a final SSE error event, stop listening.
  void stop();
  int port() const;
  // For the log: what is being served (model, format, load time, context, engine, KV pool,
  // threads, kernels) after start(), and what was served after run().
  std::string startup_summary() const;
  std::string shutdown_summary() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvad::serve
