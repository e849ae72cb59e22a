// kvad serve: the OpenAI-compatible server and web UI (src/serve). This file is only the command
// line and the signals: SIGINT/SIGTERM stop the server cleanly (in-flight streams finish or are cut
// with a final error event) and the process exits 0.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "cli/common.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/threads.h"
#include "serve/server.h"

namespace kvad::cli {

void add_serve(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server with a web UI (chat, models, dashboard, benchmark)");
  struct Args {
    serve::ServeOptions o;
    int threads = 0;
    std::string kv_memory, memory, gpu_memory, api_key_file, kv_type = "auto", log_level = "info";
    bool no_model = false;
  };
  auto a = std::make_shared<Args>();
  auto* model = cmd->add_option("-m,--model", a->o.model, "model to load at start (folder, store name, .gguf or Hub "
                                "ORG/NAME; default: the default model, as `kvad run`); the UI can load another");
  cmd->add_flag("--no-model", a->no_model, "start with no model loaded (load one from the UI or POST /kvad/models/load)")
      ->excludes(model);
  cmd->add_option("--host", a->o.host, "address to listen on (default 127.0.0.1: this machine only)");
  cmd->add_option("--port", a->o.port, "port (default 8080; 0 = any free port, printed at start)")->check(CLI::Range(0, 65535));
  cmd->add_option("--api-key", a->o.api_key, "require 'Authorization: Bearer KEY' on /v1, /api and /metrics "
                  "(visible in ps: prefer --api-key-file or $KVAD_API_KEY)");
  cmd->add_option("--api-key-file", a->api_key_file, "read the API key from this file (first line)");
  cmd->add_option("--cors", a->o.cors_origins, "an origin (https://app.example, or *) whose pages may call the API from a "
                  "browser (repeatable; default: only the UI this server serves)");
  cmd->add_option("--alias", a->o.alias, "the model id to serve --model as (for clients with a hard-coded model name); "
                  "requests may name it or the model's own name")
      ->check(CLI::TypeValidator<std::string>())
      ->each([](const std::string& v) {
        if (v.empty() || v.size() > 256) throw CLI::ValidationError("--alias", "must be 1 to 256 characters");
      });
  cmd->add_option("--allow-host", a->o.allowed_hosts, "a host name clients may use to reach this server, checked against "
                  "the Host header against DNS rebinding (repeatable)");
  cmd->add_option("--request-timeout", a->o.request_seconds, "seconds a client has to send a whole request (default 10)")
      ->check(CLI::Range(1.0, 3600.0));
  add_ctx_option(cmd, a->o.ctx);
  cmd->add_option("-q,--quant", a->o.quant, "weights in memory: auto (as stored), f32, bf16, q8, q4, or q4k / q6k (llama.cpp's "
                  "K-quants; every width a multiple of 256). A .gguf file runs as stored")
      ->check(CLI::IsMember({"auto", "f32", "bf16", "q8", "q4", "q4k", "q6k"}));
  cmd->add_option("--models-dir", a->o.model_dirs, "folder of model folders to offer in the UI (repeatable; the store is always offered)");
  cmd->add_option("--max-body", a->o.max_body, "largest request body in bytes (default 32 MiB; larger gets 413)");
  cmd->add_option("--http-threads", a->o.http_threads, "connections served at once (default 32)")->check(CLI::Range(4, 1024));
  cmd->add_option("--parallel", a->o.parallel, "sequences decoding together in one batch (default 4)")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--queue", a->o.queue, "requests that may wait beyond --parallel; past it, 429 (default 64)")
      ->check(CLI::Range(0, 100000));
  cmd->add_option("--max-choices", a->o.max_choices, "most choices (n) one request may ask for; at most --parallel (default 8)")
      ->check(CLI::Range(1, 128));
  cmd->add_option("--kv-memory", a->kv_memory, "KV block pool size, e.g. 2GiB or 512MiB (default: the context x --parallel)");
  add_kv_type_option(cmd, a->kv_type);
  add_device_option(cmd, a->o.device);
  add_gpu_memory_option(cmd, a->gpu_memory);
  add_snapshot_options(cmd, a->o.snapshot_every, a->o.snapshots);
  add_spec_args(cmd, a->o.speculative);
  add_lora_option(cmd, a->o.loras);
  cmd->add_option("--image-model", a->o.image_models, "a Stable Diffusion 1.5 / SDXL model to serve at "
                  "/v1/images/generations and on the UI's Images page: a diffusers folder, a store or Hub name, or a "
                  "single-file checkpoint with --image-base (repeatable; its id is the folder's or file's name)");
  cmd->add_option("--memory", a->memory, "one memory budget for the language model (weights + KV pool), the image "
                  "models and a painting's working memory, e.g. 20GiB (default: 90% of this machine's); image requests "
                  "that would not fit are refused with a 400");
  cmd->add_option("--image-quant", a->o.image_quant, "weights of the --image-model painters: f32 (default), bf16 or q8 "
                  "(as kvad images make --quant)")->check(CLI::IsMember({"f32", "bf16", "q8"}));
  cmd->add_option("--image-base", a->o.image_base, "the diffusers folder single-file --image-model checkpoints take their "
                  "configs and tokenizers from (the model they were fine-tuned from)");
  cmd->add_option("--step-tokens", a->o.step_tokens, "rows one engine step may compute: the decodes, then prefill chunks "
                  "(default 256; while streams decode, prefill is further held to 2 rows per decode, at least 16)")
      ->check(CLI::Range(1, 65536));
  cmd->add_flag("--shared-prefix-cache", a->o.shared_prefix_cache,
               "let every client reuse every other client's cached prompt prefixes (default: per client address and "
               "API key, or per the request's cache_salt; cached_tokens would otherwise tell one client about another's prompts)");
  cmd->add_option("--trusted-proxy", a->o.trusted_proxies, "the address of a front end (nginx) whose X-Forwarded-For names "
                  "the real client, whose cached prefixes are then its own (repeatable; kvad cluster sets it)");
  cmd->add_option("--shutdown-grace", a->o.shutdown_grace, "seconds in-flight answers get to finish on SIGTERM (default 3)");
  cmd->add_option("-t,--threads", a->threads, "threads to compute with (default: all cores)")->check(CLI::Range(0, 1024));
  cmd->add_option("--log-level", a->log_level, "what stderr gets: error, warn, info (default: start and stop summaries, "
                  "a line per request with its tokens, time and speed), debug (also polling, client and body size)")
      ->check(CLI::IsMember({"error", "warn", "info", "debug"}));
  cmd->add_flag_callback("--verbose", [a] { a->log_level = "debug"; }, "the same as --log-level debug");
  cmd->add_flag_callback("--quiet", [a] { a->log_level = "warn"; }, "the same as --log-level warn: no request lines");
  cmd->callback([a] {
    // Signals go to one thread that asks the server to stop; every other thread has them blocked,
    // so the mask is set before the first thread exists (the compute pool, made by --threads: a
    // worker started earlier would take SIGTERM's default action and kill the process mid-answer).
    // SIGPIPE is ignored: a client that goes away is an error return from write, not a crash.
    signal(SIGPIPE, SIG_IGN);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    apply_threads(a->threads);
    a->o.kv_type = kv_type_for(a->kv_type);
    a->o.log_level = serve::parse_log_level(a->log_level);
    const bool info = a->o.log_level >= serve::LogLevel::Info;
    if (a->o.model.empty() && !a->no_model) a->o.model = default_model();
    // The Models page offers the default model's folder beside the store and --models-dir.
    if (is_directory(shipped_models_dir())) a->o.model_dirs.push_back(shipped_models_dir());
    if (!a->kv_memory.empty()) a->o.kv_bytes = parse_byte_size(a->kv_memory, "--kv-memory");
    if (!a->memory.empty()) a->o.memory_bytes = parse_byte_size(a->memory, "--memory");
    if (!a->gpu_memory.empty()) a->o.device_memory = parse_byte_size(a->gpu_memory, "--gpu-memory");
    if (!a->api_key_file.empty()) {
      if (!a->o.api_key.empty()) fail("give --api-key or --api-key-file, not both");
      std::string k = read_file(a->api_key_file);
      k = k.substr(0, k.find_first_of("\r\n"));
      if (k.empty()) fail("{}: the API key file is empty", a->api_key_file);
      a->o.api_key = k;
    } else if (a->o.api_key.empty()) {
      if (const char* k = std::getenv("KVAD_API_KEY"); k && *k) a->o.api_key = k;
    }
    if (!serve::is_loopback_host(a->o.host) && a->o.api_key.empty())
      std::fprintf(stderr,
                   "kvad serve: WARNING: listening on %s without an API key: anyone who can reach this address can "
                   "run, load, train and delete models. Set --api-key-file or KVAD_API_KEY.\n",
                   a->o.host.c_str());
    serve::Server server(a->o);
    int port = server.start();
    std::atomic<bool> done{false};
    std::thread sig([&] {
      timespec ts{0, 200'000'000};
      while (!done) {
        int s = sigtimedwait(&set, nullptr, &ts);
        if (s == SIGINT || s == SIGTERM) {
          std::fprintf(stderr, "kvad serve: %s, stopping\n", s == SIGINT ? "SIGINT" : "SIGTERM");
          server.stop();
          return;
        }
      }
    });
    if (info) std::fprintf(stderr, "kvad serve: %s\n", server.startup_summary().c_str());
    std::fprintf(stderr, "kvad serve: listening on http://%s:%d/ (web UI there, OpenAI API under /v1)%s\n",
                 a->o.host.c_str(), port, a->o.api_key.empty() ? "" : ", API key required");
    std::fflush(stderr);
    server.run();
    done = true;
    sig.join();
    server.stop();
    if (info) std::fprintf(stderr, "kvad serve: stopped after %s\n", server.shutdown_summary().c_str());
  });
}

}  // namespace kvad::cli
