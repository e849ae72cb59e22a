// /v1/chat/completions, /v1/completions, /v1/models: OpenAI's API over the scheduler.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>

#include "serve/conn_guard.h"
#include "serve/gen_job.h"
#include "serve/generation.h"
#include "serve/server_impl.h"

namespace kvad::serve {

namespace {

// What the answer routes need to know of the request beyond the job.
struct AnswerContext {
  int64_t prompt_tokens = 0, context_length = 0;
  ToolFamily tools = ToolFamily::None;  // chat answers' tool calls are read in this syntax
};

// OpenAI's finish_reason for an answer that called: "tool_calls" where it ended by itself.
std::string finish_with_calls(const std::string& finish, bool called) {
  return called && finish == "stop" ? "tool_calls" : finish;
}

// The engine's own figures for choice 0 (llama-server sends `timings` too): a client timing the
// stream itself measures its network reads, which a busy machine delivers several tokens at a time.
Json timings_json(const GenerateResult& r, double ttft_seconds) {
  return {{"prefill_tokens_per_second", r.prefill_tok_s()},
          {"decode_tokens_per_second", r.decode_tok_s()},
          {"time_to_first_token_seconds", ttft_seconds},
          {"draft_n", r.draft_tokens},  // llama-server's names for speculative decoding's counts
          {"draft_n_accepted", r.draft_accepted}};
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
  while (ended < n) {
    GenEvent ev;
    if (!next_event_or_cancel(s, *job, ev)) continue;
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
  if (r.chat && ac.tools != ToolFamily::None)
    for (ChoiceOut& c : choices) {
      ParsedAnswer a = parse_tool_calls(ac.tools, c.text);
      c.tool_calls = std::move(a.calls);
      if (!c.tool_calls.empty()) c.text = std::move(a.content);
      c.finish = finish_with_calls(c.finish, !c.tool_calls.empty());
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
  std::vector<ToolCallStream> calls;  // per choice, when tool calls are read
  std::vector<int> call_count;        // per choice: the index of its next call
};

// A chat stream's text through the choice's tool-call reader: content chunks for text that is not a
// call, a tool_calls chunk per call. The token's logprobs go with the first chunk (alone if the text is held).
std::string tool_stream_chunks(const GenRequest& r, const ResponseMeta& meta, StreamState& st, int c,
                               std::vector<ToolCallStream::Piece> pieces, const std::vector<TokenOut>* lp) {
  std::string out;
  if (pieces.empty() && lp)
    out += sse(chat_chunk(meta, c, std::nullopt, "", std::nullopt, lp, r.top_logprobs > 0, r.include_usage));
  for (ToolCallStream::Piece& p : pieces) {
    if (p.call) out += sse(tool_call_chunk(meta, c, st.call_count[(size_t)c]++, *p.call, r.include_usage));
    else out += sse(chat_chunk(meta, c, std::nullopt, p.content, std::nullopt, lp, r.top_logprobs > 0, r.include_usage));
    lp = nullptr;
  }
  return out;
}

void answer_stream(Server::Impl& s, const GenRequest& r, const std::shared_ptr<GenJob>& job, const ResponseMeta& meta,
                   const AnswerContext& ac, httplib::Response& res) {
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  auto st = std::make_shared<StreamState>();
  st->text_offset.assign((size_t)job->choices(), 0);
  if (r.chat && ac.tools != ToolFamily::None) {
    st->calls.assign((size_t)job->choices(), ToolCallStream(ac.tools));
    st->call_count.assign((size_t)job->choices(), 0);
  }
  Server::Impl* sp = &s;
  s.metrics.streams_active++;
  res.set_chunked_content_provider(
      "text/event-stream",
      [sp, r, job, meta, ac, st](size_t, httplib::DataSink& sink) {
        Server::Impl& s = *sp;
        auto write = [&](const std::string& data) { return stream_write(s, sink, data, *job, st->client_gone); };
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
            if (!st->calls.empty()) {
              out += tool_stream_chunks(r, meta, *st, c, st->calls[(size_t)c].feed(ev.tok.text), lp);
              continue;
            }
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
              if (!st->calls.empty()) {
                ToolCallStream& calls = st->calls[(size_t)c];
                out += tool_stream_chunks(r, meta, *st, c, calls.finish(), nullptr);
                finish = finish_with_calls(finish, calls.called());
              }
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
      [sp, job, st](bool) { stream_released(*sp, *job, st->finished, st->client_gone); });
}

void openai_generation(Server::Impl& s, const httplib::Request& req, httplib::Response& res, bool chat) {
  GenRequest r = chat ? parse_chat_request(req.body) : parse_completion_request(req.body);
  Prepared p = prepare(s, r);
  ResponseMeta meta{new_completion_id(chat), model_id(*p.model), now_unix()};
  AnswerContext ac{(int64_t)p.prompt.size(), p.context_length, p.tools};
  auto job = std::make_shared<GenJob>(p.model, std::move(p.prompt), std::move(p.opts), cache_scope(s, req, r), r.n);
  job->set_loras(std::move(p.loras));
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
  if (!asked.empty() && asked != model_id(*m) && asked != model_own_id(*m) && asked != m->name && asked != m->path)
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
    guarded(res, [&] { openai_generation(s, req, res, true); });
  });
  s.http.Post("/v1/completions", [&s](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { openai_generation(s, req, res, false); });
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
