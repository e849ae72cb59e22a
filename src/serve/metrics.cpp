#include "serve/metrics.h"

#include <cstring>

#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

#include "serve/engine_thread.h"

namespace kvad::serve {

void Metrics::count_request(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lk(mu_);
  requests_[{endpoint, status}]++;
}

size_t rss_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long size = 0, resident = 0;
  int n = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  return n == 2 ? (size_t)resident * (size_t)sysconf(_SC_PAGESIZE) : 0;
}

std::string endpoint_label(const std::string& method, const std::string& path) {
  static const char* known[] = {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics",
                                "/tokenize", "/detokenize", "/props", "/slots"};
  for (const char* k : known)
    if (path == k) return k;
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
  // The UI's API (/kvad/...) and Ollama's (/api/...): the prefix and the next part of the path.
  for (const char* prefix : {"/kvad/", "/api/"})
    if (size_t n = std::strlen(prefix); path.rfind(prefix, 0) == 0) {
      size_t second = path.find('/', n);
      return second == std::string::npos ? path : path.substr(0, second);
    }
  if (method == "GET") return "ui";
  return "other";
}

static void gauge(std::string& out, const char* name, const char* help, double v) {
  out += fmt::format("# HELP {0} {1}\n# TYPE {0} gauge\n{0} {2}\n", name, help, v);
}

static void counter(std::string& out, const char* name, const char* help, double v) {
  out += fmt::format("# HELP {0} {1}\n# TYPE {0} counter\n{0} {2}\n", name, help, v);
}

std::string Metrics::prometheus(EngineThread& s) const {
  std::string out;
  out += "# HELP kvad_requests_total HTTP requests answered, by endpoint and status.\n"
         "# TYPE kvad_requests_total counter\n";
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (const auto& [k, v] : requests_)
      out += fmt::format("kvad_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n", k.first, k.second, v);
  }
  counter(out, "kvad_generations_total", "Generation requests that ran on the engine.", (double)generations);
  counter(out, "kvad_prompt_tokens_total", "Prompt tokens of finished generations.", (double)prompt_tokens);
  counter(out, "kvad_cached_prompt_tokens_total", "Prompt tokens served from the KV cache (prefix reuse).",
          (double)cached_tokens);
  counter(out, "kvad_completion_tokens_total", "Tokens generated.", (double)completion_tokens);
  counter(out, "kvad_busy_rejections_total", "Requests refused with 429 because the engine was busy.",
          (double)busy_rejections);
  counter(out, "kvad_client_disconnects_total", "Streams whose client went away before the end.", (double)disconnects);
  counter(out, "kvad_decode_seconds_total", "Seconds spent decoding (after the first token).", decode_seconds.load());
  counter(out, "kvad_prefill_seconds_total", "Seconds spent in prefill.", prefill_seconds.load());
  counter(out, "kvad_prefill_tokens_total", "Prompt tokens prefilled (not served from cache).", (double)prefill_tokens);
  LiveStats& e = s.stats();
  gauge(out, "kvad_decode_tokens_per_second", "Decode speed of the last generation.", e.last_decode_tok_s.load());
  gauge(out, "kvad_prefill_tokens_per_second", "Prefill speed of the last generation.", e.last_prefill_tok_s.load());
  gauge(out, "kvad_time_to_first_token_seconds", "Time to first token of the last generation.", e.last_ttft_s.load());
  gauge(out, "kvad_queue_depth", "Jobs admitted and waiting for the engine.", (double)s.queued());
  gauge(out, "kvad_in_flight", "Jobs running or waiting on the engine.", (double)s.in_flight());
  gauge(out, "kvad_streams_active", "Streaming responses being written now.", (double)streams_active);
  gauge(out, "kvad_kv_cache_bytes", "KV cache memory in blocks referenced by a sequence now.", (double)e.kv_bytes.load());
  gauge(out, "kvad_kv_cache_capacity_bytes", "KV block pool size (--kv-memory).", (double)e.kv_capacity_bytes.load());
  gauge(out, "kvad_kv_blocks_used", "KV blocks referenced by running sequences or sessions.", (double)e.blocks_used.load());
  gauge(out, "kvad_kv_blocks_cached", "KV blocks free for reuse that still hold a prefix (evicted LRU).", (double)e.blocks_cached.load());
  gauge(out, "kvad_kv_blocks_free", "KV blocks holding nothing.", (double)e.blocks_free.load());
  gauge(out, "kvad_kv_block_size", "Positions per KV block.", (double)e.block_size.load());
  gauge(out, "kvad_sequences_running", "Sequences in the continuous batch.", (double)e.running.load());
  gauge(out, "kvad_sequences_waiting", "Sequences admitted and waiting for a slot or blocks.", (double)e.waiting.load());
  counter(out, "kvad_engine_steps_total", "Forward passes of the engine loop.", (double)e.steps.load());
  counter(out, "kvad_preemptions_total", "Sequences preempted (blocks freed, recomputed later).", (double)e.preemptions.load());
  counter(out, "kvad_draft_tokens_total", "Speculative decoding: drafted tokens the model verified.", (double)e.draft_tokens.load());
  counter(out, "kvad_draft_accepted_total", "Speculative decoding: drafted tokens kept (each saved a decode step).",
          (double)e.draft_accepted.load());
  gauge(out, "kvad_kv_cache_bytes_per_token", "KV cache bytes stored per position.", (double)e.kv_bytes_per_token.load());
  gauge(out, "kvad_kv_cache_tokens", "Positions held in the KV cache, all sessions.", (double)e.tokens_held.load());
  gauge(out, "kvad_context_length", "Context length of the loaded model (after --ctx).", (double)e.context_length.load());
  gauge(out, "kvad_weight_bytes", "Bytes of the loaded model's weights.", (double)e.weight_bytes.load());
  gauge(out, "kvad_resident_memory_bytes", "Resident set size of the server process.", (double)rss_bytes());
  return out;
}

}  // namespace kvad::serve
