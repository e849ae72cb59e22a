// /kvad/*: the web UI's own JSON API (models, dashboard figures, scoring, benchmarks, training).
#include <condition_variable>
#include <functional>

#include "core/threads.h"
#include "serve/catalog.h"
#include "serve/fn_job.h"
#include "serve/score.h"
#include "serve/server_impl.h"

namespace kvad::serve {

namespace {

Json body_json(const httplib::Request& req) {
  if (req.body.empty()) return Json::object();
  return parse_request_body(req.body);
}

std::string kv_per_token(const Model& m, kernels::KvType kv_type);

Json loaded_json(Server::Impl& s) {
  auto m = s.sched.model();
  if (!m) return nullptr;
  const ModelConfig& c = m->model->config();
  return {{"id", model_id(*m)},
          {"name", m->name},
          {"path", m->path},
          {"architecture", c.architecture},
          {"parameters", m->model->parameter_count()},
          {"weight_bytes", m->model->weight_bytes()},
          {"weight_format", m->model->weight_format()},
          {"context_length", s.sched.stats().context_length.load()},
          {"model_context_length", m->model->context_length()},
          {"layers", c.n_layers},
          {"hidden", c.hidden},
          {"heads", c.n_heads},
          {"kv_heads", c.n_kv_heads},
          {"head_dim", c.head_dim},
          {"vocab", c.vocab_size},
          {"chat", m->chat_template != nullptr},
          {"load_seconds", m->load_seconds},
          {"kv_per_token", kv_per_token(*m->model, s.sched.config().kv_type)}};
}

// What one position costs in the cache, layer kind by layer kind (MLA: a latent row; Qwen3-Next's
// recurrent layers: nothing), as the dashboard explains it.
std::string kv_per_token(const Model& m, kernels::KvType kv_type) {
  MemorySpec spec = m.memory_spec();
  spec.kv_type = kv_type;
  return spec.describe_per_token();
}

Json stats_json(Server::Impl& s) {
  LiveStats& e = s.sched.stats();
  size_t per_tok = e.kv_bytes_per_token;
  int64_t ctx = e.context_length;
  Metrics& m = s.metrics;
  double dec_s = m.decode_seconds.load(), pre_s = m.prefill_seconds.load();
  return {{"rss_bytes", rss_bytes()},
          {"weight_bytes", e.weight_bytes.load()},
          {"kv_bytes", e.kv_bytes.load()},
          {"kv_tokens", e.tokens_held.load()},
          {"kv_bytes_per_token", per_tok},
          {"kv_type", kernels::kv_type_name(s.sched.config().kv_type)},
          {"kv_bytes_full_context", (double)per_tok * (double)ctx},
          {"kv_capacity_bytes", e.kv_capacity_bytes.load()},
          {"kv_blocks",
           {{"total", e.blocks_total.load()},
            {"used", e.blocks_used.load()},
            {"cached", e.blocks_cached.load()},
            {"free", e.blocks_free.load()},
            {"block_size", e.block_size.load()}}},
          {"context_length", ctx},
          {"last",
           {{"prompt_tokens", e.last_prompt_tokens.load()},
            {"cached_tokens", e.last_cached_tokens.load()},
            {"completion_tokens", e.last_completion_tokens.load()},
            {"prefill_tok_s", e.last_prefill_tok_s.load()},
            {"decode_tok_s", e.last_decode_tok_s.load()},
            {"ttft_s", e.last_ttft_s.load()}}},
          {"totals",
           {{"generations", m.generations.load()},
            {"prompt_tokens", m.prompt_tokens.load()},
            {"cached_tokens", m.cached_tokens.load()},
            {"completion_tokens", m.completion_tokens.load()},
            {"busy_rejections", m.busy_rejections.load()},
            {"disconnects", m.disconnects.load()},
            {"decode_tok_s", dec_s > 0 ? (double)m.completion_tokens.load() / dec_s : 0},
            {"prefill_tok_s", pre_s > 0 ? (double)m.prefill_tokens.load() / pre_s : 0}}},
          {"engine", {{"busy", s.sched.running_kind()}, {"busy_seconds", s.sched.busy_seconds()},
                      {"in_flight", s.sched.in_flight()}, {"queued", s.sched.queued()},
                      {"running", e.running.load()}, {"waiting", e.waiting.load()},
                      {"parallel", s.sched.config().parallel}, {"steps", e.steps.load()},
                      {"preemptions", e.preemptions.load()},
                      {"threads", pool().size()}, {"jobs_run", e.jobs_run.load()}}},
          {"recurrent_state",
           {{"bytes_per_sequence", e.state_bytes.load()},
            {"sequences", e.states_used.load()},
            {"snapshots", e.snapshots_held.load()},
            {"snapshot_every", e.snapshot_every.load()}}},
          {"streams_active", m.streams_active.load()},
          {"model", loaded_json(s)}};
}

int64_t int_field(const Json& j, const char* k, int64_t dflt, int64_t lo, int64_t hi) {
  if (!j.contains(k) || j[k].is_null()) return dflt;
  if (!j[k].is_number_integer()) throw HttpError(400, fmt::format("'{}' must be an integer", k), "invalid_request_error", k);
  int64_t v = j[k].get<int64_t>();
  if (v < lo || v > hi) throw HttpError(400, fmt::format("'{}' must be between {} and {}", k, lo, hi), "invalid_request_error", k);
  return v;
}

}  // namespace

std::string catalog_model_path(Server::Impl& s, const std::string& name, const char* field) {
  auto m = s.sched.model();
  if (m && (m->name == name || model_id(*m) == name)) return m->path;
  for (const ModelEntry& e : list_models(s.opts.model_dirs))
    if (e.name == name) {
      if (!e.supported)
        throw HttpError(400, fmt::format("'{}' {}: {}", field, name, e.problem.empty() ? "kvad cannot run it" : e.problem),
                        "invalid_request_error", field);
      return e.path;
    }
  throw HttpError(404,
                  fmt::format("'{}': '{}' is not a model the Models page lists (GET /kvad/models names them: kvad's "
                              "store, the Hugging Face cache, --models-dir folders and the loaded model)",
                              field, name),
                  "invalid_request_error", field, "model_not_found");
}

void add_api_routes(Server::Impl& s) {
  httplib::Server& h = s.http;
  h.Get("/kvad/info", [&s](const httplib::Request&, httplib::Response& res) {
    reply_json(res, {{"version", "0.1.0"},
                     {"model", loaded_json(s)},
                     {"ctx_cap", s.opts.ctx},
                     {"quant", s.opts.quant},
                     {"max_body", s.opts.max_body},
                     {"features", {{"train", s.train.available()}, {"pull", true}}}});
  });
  h.Get("/kvad/stats", [&s](const httplib::Request&, httplib::Response& res) { reply_json(res, stats_json(s)); });

  h.Get("/kvad/models", [&s](const httplib::Request&, httplib::Response& res) {
    guarded(res, [&] {
      auto m = s.sched.model();
      std::vector<ModelEntry> list = list_models(s.opts.model_dirs);
      bool loaded_listed = false;
      Json out = Json::array();
      for (const ModelEntry& e : list) {
        Json j = to_json(e);
        j["loaded"] = m && (e.path == m->path || e.name == m->name);
        loaded_listed |= j["loaded"].get<bool>();
        out.push_back(j);
      }
      if (m && !loaded_listed) {
        Json j = to_json(describe_model(m->path, m->name, "folder"));
        j["loaded"] = true;
        out.insert(out.begin(), j);
      }
      reply_json(res, {{"models", out}, {"loaded", loaded_json(s)}, {"pull", s.pull.status()}});
    });
  });
  h.Post("/kvad/models/load", [&s](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      Json b = body_json(req);
      if (!b.contains("name") || !b["name"].is_string() || b["name"].get<std::string>().empty())
        throw HttpError(400, "'name' (a store name or a model folder) is required", "invalid_request_error", "name");
      std::string name = b["name"];
      auto job = std::make_shared<FnJob>("loading a model", [name](ModelHost& e) {
        LoadedModel lm;
        try {
          lm = e.load(name);
        } catch (const Error& x) {
          throw HttpError(400, x.what(), "invalid_request_error", "name");
        }
        lm.loras = load_store_adapters(lm);  // the adapters kvad train --lora made for it, at scale 0
        e.set_model(std::make_shared<LoadedModel>(std::move(lm)));
        return Json::object();
      });
      run_and_wait(s, job);
      reply_json(res, {{"loaded", loaded_json(s)}});
    });
  });
  h.Delete(R"(/kvad/models/(.+))", [&s](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      std::string name = req.matches[1];
      auto m = s.sched.model();
      if (m && (m->name == name || model_id(*m) == name))
        throw HttpError(409, fmt::format("'{}' is loaded; load another model before removing it", name),
                        "invalid_request_error", "name");
      if (name.find('/') != std::string::npos) s.pull.remove(name);  // a Hub model: kvad rm
      else remove_from_store(name);
      reply_json(res, {{"removed", name}});
    });
  });
  h.Post("/kvad/models/pull", [&s](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      Json b = body_json(req);
      if (!b.contains("name") || !b["name"].is_string())
        throw HttpError(400, "'name' (ORG/NAME) is required", "invalid_request_error", "name");
      reply_json(res, s.pull.start(b["name"]));
    });
  });
  // The model being loaded (the Models page polls it while its load request waits): {} when none.
  h.Get("/kvad/models/loading", [&s](const httplib::Request&, httplib::Response& res) {
    const LoadProgress::State p = s.sched.load_progress();
    if (p.name.empty()) return reply_json(res, Json::object());
    reply_json(res, {{"name", p.name}, {"stage", p.stage}, {"done", p.done}, {"total", p.total}, {"unit", p.unit}});
  });
  h.Get("/kvad/models/pull", [&s](const httplib::Request&, httplib::Response& res) { reply_json(res, s.pull.status()); });
  h.Post("/kvad/models/pull/cancel", [&s](const httplib::Request&, httplib::Response& res) {
    s.pull.cancel();
    reply_json(res, s.pull.status());
  });

  h.Post("/kvad/score", [&s](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      Json b = body_json(req);
      if (!b.contains("text") || !b["text"].is_string() || b["text"].get<std::string>().empty())
        throw HttpError(400, "'text' (the text to score) is required", "invalid_request_error", "text");
      int64_t window = int_field(b, "window", 0, 0, 1 << 20);
      reply_json(res, run_and_wait(s, std::make_shared<ScoreJob>(b["text"].get<std::string>(), window)));
    });
  });

  h.Post("/kvad/bench/model", [&s](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      Json b = body_json(req);
      std::vector<int64_t> lengths = {16, 128, 512};
      if (b.contains("prompt_lengths")) {
        if (!b["prompt_lengths"].is_array() || b["prompt_lengths"].empty() || b["prompt_lengths"].size() > 8)
          throw HttpError(400, "'prompt_lengths' must be a list of 1..8 integers", "invalid_request_error", "prompt_lengths");
        lengths.clear();
        for (const Json& x : b["prompt_lengths"]) {
          if (!x.is_number_integer() || x.get<int64_t>() < 1 || x.get<int64_t>() > 32768)
            throw HttpError(400, "'prompt_lengths' entries must be integers in 1..32768", "invalid_request_error",
                            "prompt_lengths");
          lengths.push_back(x.get<int64_t>());
        }
      }
      int64_t decode = int_field(b, "decode_tokens", 32, 1, 4096);
      reply_json(res, run_and_wait(s, std::make_shared<ModelBenchJob>(lengths, decode)));
    });
  });
  h.Post("/kvad/bench/serving", [&s](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      Json b = body_json(req);
      auto m = s.sched.model();
      if (!m) throw HttpError(404, "no model is loaded", "invalid_request_error", "model", "model_not_found");
      SweepParams p;
      if (b.contains("levels")) {
        if (!b["levels"].is_array() || b["levels"].empty() || b["levels"].size() > 8)
          throw HttpError(400, "'levels' must be a list of 1 to 8 concurrency levels", "invalid_request_error", "levels");
        p.levels.clear();
        for (const Json& l : b["levels"]) {
          if (!l.is_number_integer() || l.get<int64_t>() < 1 || l.get<int64_t>() > 64)
            throw HttpError(400, "each concurrency level must be an integer from 1 to 64", "invalid_request_error", "levels");
          p.levels.push_back(l.get<int>());
        }
      }
      p.input_len = (int)int_field(b, "input_len", 64, 1, 8192);
      p.output_len = (int)int_field(b, "output_len", 32, 2, 4096);
      int64_t ctx = s.sched.stats().context_length.load();
      if (p.input_len + p.output_len > ctx)
        throw HttpError(400, fmt::format("input_len + output_len is {} but the context is {} tokens", p.input_len + p.output_len, ctx),
                        "invalid_request_error", "input_len");
      int64_t vocab = m->model->config().vocab_size;  // prompt ids must be tokens of this model
      p.token_lo = (int)std::min<int64_t>(100, vocab / 4);
      p.token_hi = (int)std::min<int64_t>(vocab, 20000);
      s.serving_sweep.start(p);
      reply_json(res, s.serving_sweep.status());
    });
  });
  h.Get("/kvad/bench/serving", [&s](const httplib::Request&, httplib::Response& res) { reply_json(res, s.serving_sweep.status()); });
  h.Delete("/kvad/bench/serving", [&s](const httplib::Request&, httplib::Response& res) {
    s.serving_sweep.cancel();
    reply_json(res, s.serving_sweep.status());
  });

  // The store's adapters (kvad train --lora, the Training page's LoRA jobs), each with its id in the
  // loaded model's list when it is there.
  h.Get("/kvad/adapters", [&s](const httplib::Request&, httplib::Response& res) {
    guarded(res, [&] {
      Json list = list_store_adapters(), loaded = Json::array();
      if (auto m = s.sched.model()) loaded = s.loras.list(m);
      for (Json& a : list) {
        a["id"] = nullptr;
        for (const Json& l : loaded)
          if (same_folder(l["path"].get<std::string>(), a["path"].get<std::string>())) a["id"] = l["id"];
      }
      reply_json(res, {{"adapters", list}});
    });
  });
  h.Get("/kvad/train", [&s](const httplib::Request&, httplib::Response& res) { reply_json(res, s.train.status()); });
  h.Post("/kvad/train", [&s](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { reply_json(res, s.train.start(body_json(req))); });
  });
  h.Delete(R"(/kvad/train/(\d+))", [&s](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      s.train.cancel(std::stoll(req.matches[1]));
      reply_json(res, s.train.status());
    });
  });
}

}  // namespace kvad::serve
