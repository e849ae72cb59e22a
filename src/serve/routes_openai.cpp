// /v1/chat/completions, /v1/completions, /v1/models: OpenAI's API over the scheduler.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>

#include "serve/conn_guard.h"
#include "serve/gen_job.h"
#include "serve/server_impl.h"

namespace kvad::serve {

namespace {

int64_t now_unix() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Request -> prompt ids + options, all checks that need the model done here (HTTP thread).
struct Prepared {
  std::shared_ptr<const LoadedModel> model;
  std::vector<int32_t> prompt;
  GenerateOptions opts;
  int64_t context_length = 0;  // in force for this request
};

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
    std::string text = m.chat_template->render(r.messages, true, m.tokenizer->bos_token(), m.tokenizer->eos_token());
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

// Usage of all n choices: the prompt once, the completions summed (OpenAI's accounting).
struct ChoicesUsage {
  Usage u;
  void add(const GenerateResult& r) {
    if (r.choice == 0) {
      u.prompt_tokens = r.prompt_tokens;
      u.cached_tokens = r.cached_tokens;
    }
    u.completion_tokens += (int64_t)r.tokens.size();
  }
};

// What the answer routes need to know of the request beyond the job.
struct AnswerContext {
  int64_t prompt_tokens = 0, context_length = 0;
};

// The engine's own figures for choice 0 (llama-server sends `timings` too): a client timing the
// stream itself measures its network reads, which a busy machine delivers several tokens at a time.
Json timings_json(const GenerateResult& r, double ttft_seconds) {
  return {{"prefill_tokens_per_second", r.prefill_tok_s()},
          {"decode_tokens_per_second", r.decode_tok_s()},
          {"time_to_first_token_seconds", ttft_seconds}};
}

// Non-streaming: wait for every choice's whole answer.
void answer_whole(Server::Impl& s, const GenRequest& r, const std::shared_ptr<GenJob>& job, const ResponseMeta& meta,
                  const AnswerContext& ac, httplib::Response& res) {
  const size_t n = (size_t)job->choices();
  std::vector<std::vector<TokenOut>> toks(n);
  std::vector<ChoiceOut> choices(n);
  ChoicesUsage usage;
  GenerateResult first;  // choice 0's, for the timings
  double ttft = 0;
  size_t ended = 0;
  auto checked = std::chrono::steady_clock::now();
  while (ended < n) {
    GenEvent ev;
    bool got = job->next(ev, std::chrono::milliseconds(200));
    // A client that went away cancels its generation, as a stream's failed write does.
    if (std::chrono::steady_clock::now() - checked > std::chrono::milliseconds(200)) {
      checked = std::chrono::steady_clock::now();
      if (!job->cancelled() && GuardedHttp::client_gone()) {
        s.metrics.disconnects++;  // before the cancel, as in a stream's failed write
        job->cancel();
      }
    }
    if (!got) continue;
    size_t c = (size_t)ev.choice;
    if (ev.kind == GenEvent::Token) {
      choices[c].text += ev.tok.text;
      if (ev.tok.id >= 0) toks[c].push_back(std::move(ev.tok));
      continue;
    }
    if (ev.kind == GenEvent::Failed) throw HttpError(ev.status, ev.error, ev.status >= 500 ? "server_error" : "invalid_request_error");
    account(s, ev.result);
    if (ev.result.finish_reason == "cancelled" && s.stopping)
      throw HttpError(503, "the server is shutting down; the answer was cut", "server_error", "", "shutting_down");
    choices[c].finish = wire_finish_reason(ev.result.finish_reason);
    choices[c].context_full = context_filled(ev.result, ac.prompt_tokens, ac.context_length);
    if (r.logprobs) choices[c].logprobs = &toks[c];
    usage.add(ev.result);
    if (c == 0) {
      ttft = ev.ttft_seconds;
      first = std::move(ev.result);
    }
    ended++;
  }
  Json body = r.chat ? chat_response(meta, choices, r.top_logprobs > 0, usage.u)
                     : completion_response(meta, choices, r.top_logprobs > 0, usage.u);
  body["timings"] = timings_json(first, ttft);
  reply_json(res, body);
}

// What a stream's provider keeps between calls.
struct StreamState {
  bool started = false, finished = false;
  bool client_gone = false;  // a write failed (the disconnect is counted then)
  std::vector<size_t> text_offset;  // per choice (completions' logprobs)
  size_t ended = 0;
  ChoicesUsage usage;
  Json timings;  // choice 0's, sent with the usage
  std::vector<GenEvent> batch;
};

void answer_stream(Server::Impl& s, const GenRequest& r, const std::shared_ptr<GenJob>& job, const ResponseMeta& meta,
                   const AnswerContext& ac, httplib::Response& res) {
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  auto st = std::make_shared<StreamState>();
  st->text_offset.assign((size_t)job->choices(), 0);
  Server::Impl* sp = &s;
  s.metrics.streams_active++;
  res.set_chunked_content_provider(
      "text/event-stream",
      [sp, r, job, meta, ac, st](size_t, httplib::DataSink& sink) {
        Server::Impl& s = *sp;
        auto write = [&](const std::string& data) {
          if (sink.write(data.data(), data.size())) return true;
          // The client went away: counted first, then the engine freed at its next token, so whoever
          // sees the engine free again also sees the disconnect in /metrics.
          s.metrics.disconnects++;
          st->client_gone = true;
          job->cancel();
          return false;
        };
        const size_t n = st->text_offset.size();
        std::string out;
        if (!st->started) {
          st->started = true;
          if (r.chat)
            for (size_t c = 0; c < n; c++)
              out += sse(chat_chunk(meta, (int)c, "assistant", "", std::nullopt, nullptr, false, r.include_usage));
        }
        // Waiting (prefill, or a slow token): an SSE comment both keeps proxies from timing out and
        // finds a client that has gone.
        if (!job->next_batch(st->batch, std::chrono::milliseconds(out.empty() ? 500 : 0))) {
          if (out.empty()) out = ": keep-alive\n\n";
          return write(out);
        }
        for (GenEvent& ev : st->batch) {
          const int c = ev.choice;
          if (ev.kind == GenEvent::Token) {
            if (ev.tok.text.empty() && !r.logprobs) continue;  // held back (partial UTF-8 / stop string) or EOS
            std::vector<TokenOut> one;
            if (ev.tok.id >= 0) one.push_back(ev.tok);
            const std::vector<TokenOut>* lp = r.logprobs && !one.empty() ? &one : nullptr;
            out += sse(r.chat ? chat_chunk(meta, c, std::nullopt, ev.tok.text, std::nullopt, lp, r.top_logprobs > 0,
                                           r.include_usage)
                              : completion_chunk(meta, c, ev.tok.text, std::nullopt, lp, r.top_logprobs > 0,
                                                 st->text_offset[(size_t)c], r.include_usage));
            st->text_offset[(size_t)c] += ev.tok.text.size();
            continue;
          }
          if (ev.kind == GenEvent::Failed) {
            out += sse(error_json(ev.error, ev.status >= 500 ? "server_error" : "invalid_request_error"));
          } else {
            account(s, ev.result);
            if (ev.result.finish_reason == "cancelled" && s.stopping) {
              out += sse(error_json("the server is shutting down; the answer was cut", "server_error", "", "shutting_down"));
            } else {
              std::string finish = wire_finish_reason(ev.result.finish_reason);
              int64_t full = context_filled(ev.result, ac.prompt_tokens, ac.context_length);
              out += sse(r.chat ? chat_chunk(meta, c, std::nullopt, std::nullopt, finish, nullptr, false, r.include_usage,
                                             full)
                                : completion_chunk(meta, c, "", finish, nullptr, false, st->text_offset[(size_t)c],
                                                   r.include_usage, full));
              st->usage.add(ev.result);
              if (c == 0) st->timings = timings_json(ev.result, ev.ttft_seconds);
              if (++st->ended < n) continue;  // other choices are still going
              if (r.include_usage) {
                Json u = usage_chunk(meta, r.chat, st->usage.u);
                u["timings"] = st->timings;
                out += sse(u);
              }
            }
          }
          st->finished = true;
          out += sse_done();
          break;
        }
        if (!out.empty() && !write(out)) return false;
        if (st->finished) sink.done();
        return true;
      },
      [sp, job, st](bool) {
        // Unfinished here without a failed write: httplib saw the socket close before calling the
        // provider again and stopped the stream itself. That is a client gone too (not a shutdown).
        if (!st->finished) {
          if (!st->client_gone && !sp->stopping) sp->metrics.disconnects++;
          job->cancel();
        }
        sp->metrics.streams_active--;
      });
}

// Whose cached prefixes a request may reuse. cached_tokens (and the speed of the answer) would tell
// a client whether another client's prompt starts the way it guessed, so by default reuse is
// scoped to the client: its address and the API key it presented, or the `cache_salt` it sends
// (vLLM's design: clients sharing a salt share prefixes). --shared-prefix-cache drops the
// address, for servers whose clients all trust each other (one user, or a trusted front end).
uint64_t cache_scope(Server::Impl& s, const httplib::Request& req, const GenRequest& r) {
  std::string scope = req.get_header_value("Authorization") + "\n";
  if (!r.cache_salt.empty()) scope += "salt:" + r.cache_salt;
  else if (!s.opts.shared_prefix_cache) scope += "addr:" + req.remote_addr;
  if (scope == "\n") return 0;
  return std::hash<std::string>{}(scope) | 1;  // never 0: 0 is the shared scope
}

void generation(Server::Impl& s, const httplib::Request& req, httplib::Response& res, bool chat) {
  GenRequest r = chat ? parse_chat_request(req.body) : parse_completion_request(req.body);
  Prepared p = prepare(s, r);
  ResponseMeta meta{new_completion_id(chat), model_id(*p.model), now_unix()};
  AnswerContext ac{(int64_t)p.prompt.size(), p.context_length};
  auto job = std::make_shared<GenJob>(p.model, std::move(p.prompt), std::move(p.opts), cache_scope(s, req, r), r.n);
  EngineThread::Admit a = s.sched.submit(job);
  if (a != EngineThread::Admit::Ok) throw refusal(s, a);
  if (r.stream) answer_stream(s, r, job, meta, ac, res);
  else answer_whole(s, r, job, meta, ac, res);
}

// context_length is the context in force (--ctx), the one requests are checked against.
Json model_object(Server::Impl& s, const LoadedModel& m) {
  int64_t ctx = s.sched.stats().context_length.load();
  return {{"id", model_id(m)},
          {"object", "model"},
          {"created", 0},
          {"owned_by", "kvad"},
          {"context_length", ctx > 0 ? ctx : m.model->context_length()},
          {"model_context_length", m.model->context_length()},
          {"architecture", m.model->config().architecture}};
}

}  // namespace

std::shared_ptr<const LoadedModel> require_model(Server::Impl& s, const std::string& asked) {
  auto m = s.sched.model();
  if (!m) {
    throw HttpError(404,
                    asked.empty() ? "no model is loaded (start kvad serve with --model, or load one in the web UI)"
                                  : fmt::format("The model '{}' does not exist or is not loaded: no model is loaded", asked),
                    "invalid_request_error", "model", "model_not_found");
  }
  if (!asked.empty() && asked != model_id(*m) && asked != m->name && asked != m->path)
    throw HttpError(404, fmt::format("The model '{}' does not exist or is not loaded (loaded: '{}')", asked, model_id(*m)),
                    "invalid_request_error", "model", "model_not_found");
  return m;
}

HttpError refusal(Server::Impl& s, EngineThread::Admit a) {
  if (a == EngineThread::Admit::ShuttingDown)
    return HttpError(503, "the server is shutting down", "server_error", "", "shutting_down");
  s.metrics.busy_rejections++;
  const EngineConfig& c = s.sched.config();
  return HttpError(429,
                   fmt::format("the server is at capacity: {} requests are running or queued (--parallel {}, --queue {}); "
                               "retry after the Retry-After header's seconds",
                               s.sched.in_flight(), c.parallel, c.queue),
                   "rate_limit_error", "", "engine_busy");
}

void add_openai_routes(Server::Impl& s) {
  s.http.Post("/v1/chat/completions", [&s](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { generation(s, req, res, true); });
  });
  s.http.Post("/v1/completions", [&s](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { generation(s, req, res, false); });
  });
  s.http.Get("/v1/models", [&s](const httplib::Request&, httplib::Response& res) {
    Json data = Json::array();
    if (auto m = s.sched.model()) data.push_back(model_object(s, *m));
    reply_json(res, {{"object", "list"}, {"data", data}});
  });
  s.http.Get(R"(/v1/models/(.+))", [&s](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      std::string id = req.matches[1];
      reply_json(res, model_object(s, *require_model(s, id)));
    });
  });
}

}  // namespace kvad::serve
