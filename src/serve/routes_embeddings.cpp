// The embedding routes (OpenAI's /v1/embeddings, Ollama's /api/embed and /api/embeddings). Inputs
// are tokenized on the HTTP thread; the vectors are computed on the engine thread as an exclusive
// job between two decode steps, every input of a request in as few forwards as fit
// (runtime/embed.h), pooled as the model's sentence-transformers config says.
#include <chrono>

#include "runtime/embed.h"
#include "serve/embeddings.h"
#include "serve/fn_job.h"
#include "serve/ollama.h"
#include "serve/request_fields.h"
#include "serve/request_log.h"

namespace kvad::serve {

namespace {

struct Embedded {
  std::string model_id;
  Embeddings result;
};

// Token ids of every input, each within the context (Ollama's truncate cuts it there instead).
std::vector<std::vector<int32_t>> tokenize_inputs(const LoadedModel& m, const EmbedRequest& r, int64_t ctx) {
  std::vector<std::vector<int32_t>> ids = r.ids;
  for (const std::string& text : r.texts)  // special tokens as text; BOS/EOS as the tokenizer adds them
    ids.push_back(m.tokenizer->encode(text, /*parse_special=*/false, /*add_special=*/true, (size_t)ctx));
  const int64_t vocab = m.model->config().vocab_size;
  for (size_t i = 0; i < ids.size(); i++) {
    std::string at = ids.size() == 1 ? "'input'" : fmt::format("'input[{}]'", i);
    if (ids[i].empty()) bad("input", at + " is empty");
    if ((int64_t)ids[i].size() > ctx) {
      if (!r.truncate) bad("input", fmt::format("{} has more than {} tokens (the context)", at, ctx));
      ids[i].resize((size_t)ctx);
    }
    for (int32_t t : ids[i])
      if (t >= vocab) bad("input", fmt::format("{} holds token {}, past the vocabulary of {}", at, t, vocab));
  }
  return ids;
}

Embedded embed_request(Server::Impl& s, const EmbedRequest& r, const std::string& asked) {
  auto m = require_model(s, asked);
  int64_t ctx = s.sched.stats().context_length.load();
  if (ctx <= 0) ctx = m->model->context_length();
  if (r.dimensions > m->model->config().hidden)
    bad("dimensions", fmt::format("'dimensions' must be at most the model's width {}, got {}", m->model->config().hidden, r.dimensions));
  std::vector<std::vector<int32_t>> ids = tokenize_inputs(*m, r, ctx);
  // Read here, not in the job: two small files, but the engine thread would stall every stream on them.
  const EmbeddingSpec spec = embedding_spec(m->path);
  Embedded out{model_id(*m), {}};
  auto job = std::make_shared<FnJob>("embeddings", [&](ModelHost& host) -> Json {
    if (host.model() != m || !host.engine())
      throw HttpError(503, "the model was replaced while this request waited; send it again", "server_error");
    out.result = embed(*host.engine(), ids, spec, r.dimensions);
    return nullptr;
  });
  run_and_wait(s, job);
  this_request().prompt_tokens = out.result.tokens;
  return out;
}

}  // namespace

void add_embedding_routes(Server::Impl& s) {
  GuardedHttp& h = s.http;
  h.Post("/v1/embeddings", [&s](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      EmbedRequest r = parse_openai_embeddings(req.body);
      Embedded e = embed_request(s, r, r.model);
      reply_json(res, openai_embeddings_json(e.result.vectors, r.base64, e.model_id, e.result.tokens));
    });
  });
  // Ollama's: every vector in "embeddings", the durations in nanoseconds.
  h.Post("/api/embed", [&s](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      auto t0 = std::chrono::steady_clock::now();
      EmbedRequest r = parse_ollama_embed(req.body);
      Embedded e = embed_request(s, r, ollama_model_name(r.model));
      int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
      reply_json(res, {{"model", r.model.empty() ? e.model_id : r.model},
                       {"embeddings", e.result.vectors},
                       {"total_duration", ns},
                       {"load_duration", 0},
                       {"prompt_eval_count", e.result.tokens}});
    }, reply_ollama_error);
  });
  h.Post("/api/embeddings", [&s](const httplib::Request& req, httplib::Response& res) {  // Ollama's older one
    guarded(res, [&] {
      EmbedRequest r = parse_ollama_embeddings(req.body);
      Embedded e = embed_request(s, r, ollama_model_name(r.model));
      reply_json(res, {{"embedding", e.result.vectors[0]}});
    }, reply_ollama_error);
  });
}

}  // namespace kvad::serve
