// Ollama's native API (/api/...), so Ollama's clients work unchanged: chat and generate (NDJSON
// streams), tags, show, ps, pull, version. The same engine, scheduler and checks as the OpenAI
// routes (serve/generation.h); only the wire differs. Errors are Ollama's {"error": "..."}.
#include <chrono>
#include <ctime>
#include <filesystem>
#include <thread>

#include "core/text.h"
#include "serve/catalog.h"
#include "serve/conn_guard.h"
#include "serve/gen_job.h"
#include "serve/generation.h"
#include "serve/ollama.h"
#include "serve/request_fields.h"
#include "serve/server_impl.h"

namespace kvad::serve {

void reply_ollama_error(httplib::Response& res, const HttpError& e) {
  if (e.status == 429) res.set_header("Retry-After", "1");
  reply_json(res, ollama_error(e.what()), e.status);
}

namespace {

template <typename F>
void ollama_guarded(httplib::Response& res, F&& f) {
  guarded(res, std::forward<F>(f), reply_ollama_error);
}

std::string done_reason(const GenerateResult& r) { return r.finish_reason == "length" ? "length" : "stop"; }

OllamaFigures figures(const GenerateResult& r, std::chrono::steady_clock::time_point t0) {
  OllamaFigures f;
  f.prompt_tokens = r.prompt_tokens;
  f.completion_tokens = (int64_t)r.tokens.size();
  f.total_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  f.prefill_seconds = r.prefill_seconds;
  f.decode_seconds = r.decode_seconds;
  f.done_reason = done_reason(r);
  return f;
}

// The whole answer as one object (stream: false). With `tools`, the calls in it go to message.tool_calls.
void answer_whole(Server::Impl& s, bool chat, ToolFamily tools, const std::string& model, const std::shared_ptr<GenJob>& job,
                  std::chrono::steady_clock::time_point t0, httplib::Response& res) {
  std::string text;
  for (;;) {
    GenEvent ev;
    if (!next_event_or_cancel(s, *job, ev)) continue;
    if (ev.kind == GenEvent::Token) {
      text += ev.tok.text;
      continue;
    }
    if (ev.kind == GenEvent::Failed) throw HttpError(ev.status, ev.error);
    account(s, ev.result);
    if (ev.result.finish_reason == "cancelled" && s.stopping) throw HttpError(503, "the server is shutting down; the answer was cut");
    ParsedAnswer a = parse_tool_calls(chat ? tools : ToolFamily::None, text);
    Json done = ollama_done(chat, model, a.calls.empty() ? text : a.content, figures(ev.result, t0));
    if (!a.calls.empty()) done["message"]["tool_calls"] = ollama_tool_calls(a.calls);
    reply_json(res, done);
    return;
  }
}

// A batch of text through the tool-call reader: a line of the content it lets go, a line per call.
std::string ollama_lines(bool chat, const std::string& model, std::vector<ToolCallStream::Piece> pieces) {
  std::string out, text;
  for (ToolCallStream::Piece& p : pieces) {
    if (!p.call) {
      text += p.content;
      continue;
    }
    if (!text.empty()) out += dump(ollama_piece(chat, model, text)) + "\n", text.clear();
    Json j = ollama_piece(chat, model, "");
    j["message"]["tool_calls"] = ollama_tool_calls({*p.call});
    out += dump(j) + "\n";
  }
  if (!text.empty()) out += dump(ollama_piece(chat, model, text)) + "\n";
  return out;
}

// NDJSON: a line per batch of text, then the done line (or an error line).
void answer_stream(Server::Impl& s, bool chat, ToolFamily tools, const std::string& model, const std::shared_ptr<GenJob>& job,
                   std::chrono::steady_clock::time_point t0, httplib::Response& res) {
  struct State {
    bool finished = false, client_gone = false;
    std::vector<GenEvent> batch;
    ToolCallStream calls{ToolFamily::None};
  };
  auto st = std::make_shared<State>();
  st->calls = ToolCallStream(chat ? tools : ToolFamily::None);
  Server::Impl* sp = &s;
  s.metrics.streams_active++;
  res.set_chunked_content_provider(
      "application/x-ndjson",
      [sp, chat, model, job, t0, st](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& data) { return stream_write(*sp, sink, data, *job, st->client_gone); };
        // Nothing for a while (prefill): NDJSON has no comments, so the wait is silent; a gone
        // client is found by the next write.
        if (!job->next_batch(st->batch, std::chrono::milliseconds(500))) return true;
        std::string out, text;
        for (GenEvent& ev : st->batch) {
          if (ev.kind == GenEvent::Token) {
            text += ev.tok.text;
            continue;
          }
          out += ollama_lines(chat, model, st->calls.feed(text));
          text.clear();
          if (ev.kind != GenEvent::Failed) out += ollama_lines(chat, model, st->calls.finish());
          if (ev.kind == GenEvent::Failed) {
            out += dump(ollama_error(ev.error)) + "\n";
          } else {
            account(*sp, ev.result);
            if (ev.result.finish_reason == "cancelled" && sp->stopping)
              out += dump(ollama_error("the server is shutting down; the answer was cut")) + "\n";
            else
              out += dump(ollama_done(chat, model, "", figures(ev.result, t0))) + "\n";
          }
          st->finished = true;
          break;
        }
        if (!text.empty()) out += ollama_lines(chat, model, st->calls.feed(text));
        if (!out.empty() && !write(out)) return false;
        if (st->finished) sink.done();
        return true;
      },
      [sp, job, st](bool) { stream_released(*sp, *job, st->finished, st->client_gone); });
}

void ollama_generation(Server::Impl& s, const httplib::Request& req, httplib::Response& res, bool chat) {
  auto t0 = std::chrono::steady_clock::now();
  OllamaRequest q = chat ? parse_ollama_chat(req.body) : parse_ollama_generate(req.body);
  if (q.empty_prompt) {  // "load the model": it is loaded, or the request names another one
    auto m = require_model(s, q.gen.model);
    OllamaFigures f;
    f.done_reason = "load";
    reply_json(res, ollama_done(chat, model_id(*m), "", f));
    return;
  }
  Prepared p = prepare(s, q.gen);
  std::string model = model_id(*p.model);
  auto job = std::make_shared<GenJob>(p.model, std::move(p.prompt), std::move(p.opts), cache_scope(s, req, q.gen), 1);
  job->set_loras(std::move(p.loras));
  EngineThread::Admit a = s.sched.submit(job);
  if (a != EngineThread::Admit::Ok) throw refusal(s, a);
  if (q.gen.stream) answer_stream(s, chat, p.tools, model, job, t0, res);
  else answer_whole(s, chat, p.tools, model, job, t0, res);
}

// A stable identifier of a model's files (Ollama's digest is its manifest's sha256; kvad has no
// manifest, so this names the path and the weights' size, and changes when they do).
std::string digest_of(const ModelEntry& e) {
  uint64_t h = std::hash<std::string>{}(e.path + "\n" + std::to_string(e.bytes));
  return fmt::format("{:016x}{:016x}{:016x}{:016x}", h, h ^ 0x9e3779b97f4a7c15ull, ~h, h * 0xbf58476d1ce4e5b9ull);
}

std::string ollama_format(const ModelEntry& e) {
  return e.path.size() > 5 && e.path.compare(e.path.size() - 5, 5, ".gguf") == 0 ? "gguf" : "safetensors";
}

Json details_json(const ModelEntry& e) {
  std::string family = e.architecture;
  for (const char* suffix : {"ForCausalLM", "LMHeadModel"})
    if (size_t at = family.find(suffix); at != std::string::npos) family = family.substr(0, at);
  family = ascii_lower(family);
  return {{"parent_model", ""},
          {"format", ollama_format(e)},
          {"family", family},
          {"families", Json::array({family})},
          {"parameter_size", ollama_parameter_size(e.parameters)},
          {"quantization_level", e.format}};
}

std::string modified_at(const std::string& path) {
  std::error_code ec;
  auto t = std::filesystem::last_write_time(path, ec);
  if (ec) return ollama_timestamp();
  auto sys = std::chrono::file_clock::to_sys(t);
  std::time_t secs = std::chrono::system_clock::to_time_t(sys);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// The models kvad can run, as the UI's Models page lists them, the loaded one first.
std::vector<ModelEntry> runnable_models(Server::Impl& s) {
  std::vector<ModelEntry> out;
  auto m = s.sched.model();
  if (m) out.push_back(describe_model(m->path, m->name, "folder"));
  for (ModelEntry& e : list_models(s.opts.model_dirs))
    if (e.supported && !(m && (e.path == m->path || e.name == m->name))) out.push_back(std::move(e));
  return out;
}

Json tag_json(Server::Impl& s, const ModelEntry& e, bool loaded) {
  auto m = s.sched.model();
  std::string name = loaded && m ? model_id(*m) : e.name;
  return {{"name", name},
          {"model", name},
          {"modified_at", modified_at(e.path)},
          {"size", e.bytes},
          {"digest", digest_of(e)},
          {"details", details_json(e)}};
}

// /api/show: what Ollama's clients read of a model (its template, its shape, what it can do).
Json show_json(Server::Impl& s, const std::string& asked) {
  auto m = require_model(s, ollama_model_name(asked));
  ModelEntry e = describe_model(m->path, m->name, "folder");
  const ModelConfig& c = m->model->config();
  std::string family = details_json(e)["family"];
  Json info = {{"general.architecture", family},
               {"general.parameter_count", m->model->parameter_count()},
               {family + ".context_length", m->model->context_length()},
               {family + ".embedding_length", c.hidden},
               {family + ".block_count", c.n_layers},
               {family + ".attention.head_count", c.n_heads},
               {family + ".attention.head_count_kv", c.n_kv_heads},
               {family + ".vocab_size", c.vocab_size}};
  Json caps = Json::array({"completion"});
  return {{"license", ""},
          {"modelfile", fmt::format("# served by kvad\nFROM {}\n", m->path)},
          {"parameters", ""},
          {"template", m->chat_template ? m->chat_template->source() : ""},
          {"details", details_json(e)},
          {"model_info", info},
          {"capabilities", caps},
          {"modified_at", modified_at(e.path)}};
}

// /api/pull through `kvad pull` (a Hub name ORG/NAME; Ollama's own library names are not on the
// Hub). Streams its progress lines as {"status": line}, then {"status": "success"} or an error.
void pull(Server::Impl& s, const httplib::Request& req, httplib::Response& res) {
  Json j = parse_request_body(req.body);
  std::string name = has(j, "model") ? get_string(j, "model") : has(j, "name") ? get_string(j, "name") : "";
  if (name.empty()) bad("model", "'model' is required (a Hugging Face name ORG/NAME)");
  bool stream = has(j, "stream") ? get_bool(j, "stream") : true;
  s.pull.start(ollama_model_name(name));  // 400 when not ORG/NAME, 409 while another runs
  auto wait_done = [&s](size_t& sent, std::string& lines) {
    Json st = s.pull.status();
    const Json& log = st["log"];
    for (; sent < log.size(); sent++) lines += dump({{"status", log[sent]}}) + "\n";
    return st;
  };
  if (!stream) {
    Json st;
    while ((st = s.pull.status())["state"] == "running") std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (st["state"] != "finished") {
      std::string last = st["log"].empty() ? "kvad pull failed" : st["log"].back().get<std::string>();
      throw HttpError(500, last);
    }
    reply_json(res, {{"status", "success"}});
    return;
  }
  auto sent = std::make_shared<size_t>(0);
  Server::Impl* sp = &s;
  res.set_chunked_content_provider("application/x-ndjson", [sp, sent, wait_done](size_t, httplib::DataSink& sink) {
    std::string lines;
    Json st = wait_done(*sent, lines);
    bool running = st["state"] == "running";
    if (!running) {
      if (st["state"] == "finished") lines += dump({{"status", "success"}}) + "\n";
      else lines += dump(ollama_error(st["log"].empty() ? "kvad pull failed" : st["log"].back().get<std::string>())) + "\n";
    }
    if (!lines.empty() && !sink.write(lines.data(), lines.size())) {
      sp->pull.cancel();
      return false;
    }
    if (!running) sink.done();
    else std::this_thread::sleep_for(std::chrono::milliseconds(200));
    return true;
  });
}

}  // namespace

void add_ollama_routes(Server::Impl& s) {
  GuardedHttp& h = s.http;
  h.Post("/api/chat", [&s](const httplib::Request& req, httplib::Response& res) {
    ollama_guarded(res, [&] { ollama_generation(s, req, res, true); });
  });
  h.Post("/api/generate", [&s](const httplib::Request& req, httplib::Response& res) {
    ollama_guarded(res, [&] { ollama_generation(s, req, res, false); });
  });
  h.Get("/api/tags", [&s](const httplib::Request&, httplib::Response& res) {
    ollama_guarded(res, [&] {
      Json models = Json::array();
      bool first = true;
      for (const ModelEntry& e : runnable_models(s)) {
        models.push_back(tag_json(s, e, first && s.sched.model() != nullptr));
        first = false;
      }
      reply_json(res, {{"models", models}});
    });
  });
  h.Post("/api/show", [&s](const httplib::Request& req, httplib::Response& res) {
    ollama_guarded(res, [&] {
      Json j = parse_request_body(req.body);
      std::string name = has(j, "model") ? get_string(j, "model") : has(j, "name") ? get_string(j, "name") : "";
      if (name.empty()) bad("model", "'model' is required");
      reply_json(res, show_json(s, name));
    });
  });
  h.Get("/api/ps", [&s](const httplib::Request&, httplib::Response& res) {
    ollama_guarded(res, [&] {
      Json models = Json::array();
      if (auto m = s.sched.model()) {
        ModelEntry e = describe_model(m->path, m->name, "folder");
        Json t = tag_json(s, e, true);
        t["size"] = (uint64_t)s.sched.stats().weight_bytes.load() + (uint64_t)s.sched.stats().kv_capacity_bytes.load();
        t["size_vram"] = 0;  // CPU only
        t["expires_at"] = "2999-12-31T23:59:59Z";  // kvad keeps its model loaded until told otherwise
        t["context_length"] = s.sched.stats().context_length.load();
        models.push_back(t);
      }
      reply_json(res, {{"models", models}});
    });
  });
  h.Post("/api/pull", [&s](const httplib::Request& req, httplib::Response& res) {
    ollama_guarded(res, [&] { pull(s, req, res); });
  });
  h.Get("/api/version", [](const httplib::Request&, httplib::Response& res) { reply_json(res, {{"version", KVAD_VERSION}}); });
}

}  // namespace kvad::serve
