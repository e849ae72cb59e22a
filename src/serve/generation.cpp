#include "serve/generation.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "serve/tool_request.h"

namespace kvad::serve {

int64_t now_unix() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Prepared prepare(Server::Impl& s, const GenRequest& r) {
  Prepared p;
  p.model = require_model(s, r.model);
  const LoadedModel& m = *p.model;
  int64_t ctx = s.sched.stats().context_length.load();
  if (ctx <= 0) ctx = m.model->context_length();
  p.context_length = ctx;
  // Tokenizing stops past the context: a prompt far longer than it costs no more than one that fits.
  const size_t limit = (size_t)ctx;
  if (r.chat) {
    if (!m.chat_template)
      throw HttpError(400, fmt::format("the model '{}' has no chat template; use /v1/completions", model_id(m)),
                      "invalid_request_error", "messages", "no_chat_template");
    OrderedJson extra = OrderedJson::object();
    if (!r.tools.is_null()) extra["tools"] = r.tools;
    std::string text = m.chat_template->render(r.messages, true, m.tokenizer->bos_token(), m.tokenizer->eos_token(), extra);
    p.tools = prepare_tools(r, m.chat_template->source(), p.opts);
    p.prompt = m.tokenizer->encode(text, /*parse_special=*/true, /*add_special=*/false, limit);
  } else if (r.prompt_is_ids) {
    int64_t V = m.model->config().vocab_size;
    for (int32_t id : r.prompt_ids)
      if (id >= V) throw HttpError(400, fmt::format("'prompt' token id {} is outside the vocabulary ({} tokens)", id, V),
                                   "invalid_request_error", "prompt", "invalid_value");
    p.prompt = r.prompt_ids;
  } else {
    p.prompt = m.tokenizer->encode(r.prompt, /*parse_special=*/true, /*add_special=*/true, limit);
  }
  if (p.prompt.empty())
    throw HttpError(400, "the prompt is empty (no tokens): there is nothing to continue from", "invalid_request_error",
                    r.chat ? "messages" : "prompt");
  if ((int64_t)p.prompt.size() >= ctx)
    throw HttpError(400,
                    fmt::format("This model's maximum context length is {} tokens. However, your {} resulted in {}{} "
                                "tokens (at least one token must be left for the completion).",
                                ctx, r.chat ? "messages" : "prompt", p.prompt.size() > limit ? "more than " : "",
                                std::min(p.prompt.size(), limit)),
                    "invalid_request_error", r.chat ? "messages" : "prompt", "context_length_exceeded");
  const EngineConfig& cfg = s.sched.config();
  int64_t max_n = std::min<int64_t>(cfg.max_choices, cfg.parallel);
  if (r.n > max_n)
    throw HttpError(400,
                    fmt::format("'n' is {} but this server generates at most {} choices per request (--max-choices {}, "
                                "--parallel {})",
                                r.n, max_n, cfg.max_choices, cfg.parallel),
                    "invalid_request_error", "n", "invalid_value");
  p.opts.sampling = r.sampling;
  if (!r.seed_given) p.opts.sampling.seed = std::random_device{}() ^ (uint64_t)now_unix();
  try {
    validate(p.opts.sampling);
  } catch (const Error& e) {
    throw HttpError(400, e.what());
  }
  // Prompt + answer fit the context (OpenAI's rule): a longer max_tokens ends with "length" there.
  p.opts.max_tokens = std::min(r.max_tokens.value_or(INT64_MAX), ctx - (int64_t)p.prompt.size());
  p.opts.stop = r.stop;
  if (!r.ignore_eos) p.opts.stop_ids = m.eos_ids;
  p.opts.top_logprobs = r.logprobs ? r.top_logprobs : -1;
  if (r.constraint.grammar) p.opts.constraint = r.constraint;
  p.loras = s.loras.uses(p.model, r.lora ? &*r.lora : nullptr);
  if (p.opts.constraint.grammar)  // the parsers refused ignore_eos with it: stop_ids are the vocabulary's EOS
    p.opts.constraint_vocab = s.grammar_vocab.get(p.model);
  return p;
}

// The context length when this answer ended because the context filled, else 0. prepare() cuts
// max_tokens to the room the prompt leaves, so the engine mostly sees that as max_tokens: an answer
// that ran out of tokens exactly where the context ends filled it.
int64_t context_filled(const GenerateResult& r, int64_t prompt_tokens, int64_t ctx) {
  if (r.context_full > 0) return r.context_full;
  if (r.finish_reason == "length" && prompt_tokens + (int64_t)r.tokens.size() >= ctx) return ctx;
  return 0;
}

// Per choice: the prompt (computed once for all n) is counted with choice 0.
void account(Server::Impl& s, const GenerateResult& r) {
  RequestFigures& log = this_request();
  log.generated_tokens += (int64_t)r.tokens.size();
  log.decode_seconds = std::max(log.decode_seconds, r.decode_seconds);  // the n choices decode together
  if (r.choice == 0) log.prompt_tokens = r.prompt_tokens, log.cached_tokens = r.cached_tokens;
  s.metrics.completion_tokens += (uint64_t)r.tokens.size();
  if (r.choice == 0) {
    s.metrics.generations++;
    s.metrics.prompt_tokens += (uint64_t)r.prompt_tokens;
    s.metrics.cached_tokens += (uint64_t)r.cached_tokens;
    s.metrics.prefill_tokens += (uint64_t)(r.prompt_tokens - r.cached_tokens);
    s.metrics.prefill_seconds = s.metrics.prefill_seconds.load() + r.prefill_seconds;
  }
  s.metrics.decode_seconds = s.metrics.decode_seconds.load() + r.decode_seconds;
}

// Whose cached prefixes a request may reuse. cached_tokens (and the speed of the answer) would tell
// a client whether another client's prompt starts the way it guessed, so by default reuse is
// scoped to the client: its address and the API key it presented, or the `cache_salt` it sends
// (vLLM's design: clients sharing a salt share prefixes). --shared-prefix-cache drops the
// address, for servers whose clients all trust each other (one user, or a trusted front end).
uint64_t cache_scope(Server::Impl& s, const httplib::Request& req, const GenRequest& r) {
  std::string scope = req.get_header_value("Authorization") + "\n";
  if (!r.cache_salt.empty()) scope += "salt:" + r.cache_salt;
  else if (!s.opts.shared_prefix_cache) scope += "addr:" + client_address(s.opts, req);
  if (scope == "\n") return 0;
  return std::hash<std::string>{}(scope) | 1;  // never 0: 0 is the shared scope
}

bool next_event_or_cancel(Server::Impl& s, GenJob& job, GenEvent& ev) {
  bool got = job.next(ev, std::chrono::milliseconds(200));
  if (!job.cancelled() && GuardedHttp::client_gone()) {
    s.metrics.disconnects++;  // before the cancel, as in a stream's failed write
    job.cancel();
  }
  return got;
}

bool stream_write(Server::Impl& s, httplib::DataSink& sink, const std::string& data, GenJob& job, bool& client_gone) {
  if (sink.write(data.data(), data.size())) return true;
  s.metrics.disconnects++;
  client_gone = true;
  job.cancel();
  return false;
}

void stream_released(Server::Impl& s, GenJob& job, bool finished, bool client_gone) {
  if (!finished) {
    if (!client_gone && !s.stopping) s.metrics.disconnects++;
    job.cancel();
  }
  s.metrics.streams_active--;
}

}  // namespace kvad::serve
