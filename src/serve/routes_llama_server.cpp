// llama-server's own endpoints, for the tools written against it: /tokenize, /detokenize, /props
// and /slots (one entry per --parallel slot, the running sequences in them). /health is the
// server's (a superset of llama-server's {"status": "ok"}).
#include "core/utf8.h"
#include "serve/request_fields.h"
#include "serve/server_impl.h"

namespace kvad::serve {

namespace {

// A token's bytes as llama-server shows a piece: the text when it is whole UTF-8, else its bytes.
Json piece_json(const std::string& bytes) {
  if (is_valid_utf8(bytes)) return bytes;
  Json b = Json::array();
  for (unsigned char c : bytes) b.push_back((int)c);
  return b;
}

constexpr size_t kMaxTokenizeBytes = 16u << 20;  // the body limit (--max-body) bounds it first
constexpr size_t kMaxDetokenizeIds = 1u << 20;

void tokenize(Server::Impl& s, const httplib::Request& req, httplib::Response& res) {
  Json j = parse_request_body(req.body);
  if (!has(j, "content")) bad("content", "'content' is required");
  std::string text = get_string(j, "content");
  if (text.size() > kMaxTokenizeBytes) bad("content", "'content' is longer than 16 MiB");
  bool add_special = has(j, "add_special") && get_bool(j, "add_special");
  bool parse_special = !has(j, "parse_special") || get_bool(j, "parse_special");
  bool with_pieces = has(j, "with_pieces") && get_bool(j, "with_pieces");
  auto m = require_model(s, "");
  std::vector<int32_t> ids = m->tokenizer->encode(text, parse_special, add_special);
  Json tokens = Json::array();
  for (int32_t id : ids) {
    if (with_pieces) tokens.push_back({{"id", id}, {"piece", piece_json(m->tokenizer->token_bytes(id))}});
    else tokens.push_back(id);
  }
  reply_json(res, {{"tokens", tokens}});
}

void detokenize(Server::Impl& s, const httplib::Request& req, httplib::Response& res) {
  Json j = parse_request_body(req.body);
  if (!has(j, "tokens") || !j["tokens"].is_array()) bad("tokens", "'tokens' must be a list of token ids");
  const Json& t = j["tokens"];
  if (t.size() > kMaxDetokenizeIds) bad("tokens", "'tokens' holds more than 1048576 ids");
  auto m = require_model(s, "");
  const int64_t V = m->model->config().vocab_size;
  std::vector<int32_t> ids;
  ids.reserve(t.size());
  for (const Json& v : t) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= V)
      bad("tokens", fmt::format("'tokens' must be ids from 0 to {}", V - 1));
    ids.push_back((int32_t)v.get<int64_t>());
  }
  reply_json(res, {{"content", m->tokenizer->decode(ids)}});
}

Json props(Server::Impl& s) {
  auto m = s.sched.model();
  const EngineConfig& c = s.sched.config();
  int64_t ctx = s.sched.stats().context_length.load();
  return {{"default_generation_settings", {{"n_ctx", ctx}, {"model", m ? Json(model_id(*m)) : Json(nullptr)}}},
          {"total_slots", c.parallel},
          {"model_path", m ? Json(m->path) : Json(nullptr)},
          {"chat_template", m && m->chat_template ? Json(m->chat_template->source()) : Json("")},
          {"modalities", {{"vision", false}, {"audio", false}}},
          {"build_info", std::string("kvad ") + KVAD_VERSION}};
}

// One entry per slot (--parallel), as llama-server lists them; a slot holds a running sequence
// (a choice of a request) or is idle.
Json slots(Server::Impl& s) {
  const EngineConfig& c = s.sched.config();
  int64_t ctx = s.sched.stats().context_length.load();
  std::vector<SequenceStatus> running = s.sched.sequences();
  Json out = Json::array();
  for (int i = 0; i < c.parallel; i++) {
    Json slot = {{"id", i}, {"n_ctx", ctx}, {"is_processing", (size_t)i < running.size()}};
    if ((size_t)i < running.size()) {
      const SequenceStatus& q = running[(size_t)i];
      slot["id_task"] = q.id;
      slot["choice"] = q.choice;
      slot["n_prompt_tokens"] = q.prompt_tokens;
      slot["n_decoded"] = q.generated;
      slot["n_past"] = q.computed;
      slot["state"] = q.prefilling ? "prefill" : "decode";
    } else {
      slot["id_task"] = -1;
    }
    out.push_back(slot);
  }
  return out;
}

}  // namespace

void add_llama_server_routes(Server::Impl& s) {
  GuardedHttp& h = s.http;
  h.Post("/tokenize", [&s](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { tokenize(s, req, res); });
  });
  h.Post("/detokenize", [&s](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { detokenize(s, req, res); });
  });
  h.Get("/props", [&s](const httplib::Request&, httplib::Response& res) { reply_json(res, props(s)); });
  h.Get("/slots", [&s](const httplib::Request&, httplib::Response& res) { reply_json(res, slots(s)); });
}

}  // namespace kvad::serve
