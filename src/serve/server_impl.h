// What the route files share: the server's state and the reply helpers. Internal to src/serve.
#pragma once
#include <httplib.h>

#include <atomic>
#include <string>

#include "core/json.h"
#include "serve/conn_guard.h"
#include "serve/bench.h"
#include "serve/metrics.h"
#include "serve/openai.h"
#include "serve/pull_jobs.h"
#include "serve/engine_thread.h"
#include "serve/images.h"
#include "serve/server.h"
#include "serve/structured_output.h"
#include "serve/train_jobs.h"

namespace kvad::serve {

struct Server::Impl {
  explicit Impl(ServeOptions o);
  ServeOptions opts;
  EngineThread sched;
  Metrics metrics;
  GuardedHttp http;
  ServingSweep serving_sweep;
  LoraScales loras;  // the adapters and their scales (/lora-adapters); before train: a job adds to it
  TrainJobs train;
  PullJobs pull;
  ImageModels images;  // --image-model painters (serve/images.h)
  GrammarVocabCache grammar_vocab;  // structured outputs: the loaded model's, built on first use
  int port = 0;
  std::atomic<bool> stopping{false};
  std::atomic<bool> stopped{false};
};

// JSON text for the wire (invalid UTF-8 replaced rather than thrown on).
std::string dump(const Json& j);
void reply_json(httplib::Response& res, const Json& j, int status = 200);
// The client's address: the connection's, or behind a --trusted-proxy the last X-Forwarded-For entry.
std::string client_address(const ServeOptions& o, const httplib::Request& req);
void reply_error(httplib::Response& res, const HttpError& e);
// An error in Ollama's shape ({"error": ...}), with the status (and Retry-After) OpenAI's replies have.
void reply_ollama_error(httplib::Response& res, const HttpError& e);
// Runs a handler body, turning HttpError / kvad::Error (a 400) into the reply `reply(res, error)`
// writes: OpenAI's error object by default, Ollama's {"error"} for its routes.
template <typename F, typename Reply = void (*)(httplib::Response&, const HttpError&)>
void guarded(httplib::Response& res, F&& f, Reply reply = reply_error) {
  try {
    f();
  } catch (const HttpError& e) {
    reply(res, e);
  } catch (const Error& e) {
    reply(res, HttpError(400, e.what()));
  }
}
// The loaded model, or 404 naming what was asked for. `asked` "" = whatever is loaded.
std::shared_ptr<const LoadedModel> require_model(Server::Impl& s, const std::string& asked);
// 429 (busy) / 503 (shutting down) for a refused job.
HttpError refusal(Server::Impl& s, EngineThread::Admit a);

// The folder of a model the Models page lists (GET /kvad/models: the catalog and the loaded model)
// by its name there; else HttpError 404 naming `field`. Never a path the catalog does not list.
std::string catalog_model_path(Server::Impl& s, const std::string& name, const char* field);
// After a Training page job saved adapter `name` (store folder `dir`) for `base` (the catalog's
// name; folder `base_path`): adds it to the server's adapters (at scale 0, on the engine thread)
// when that base is loaded. {"loaded", "id"?, "message"}: what became of it, in words.
Json attach_trained_adapter(Server::Impl& s, const std::string& name, const std::string& dir, const std::string& base,
                            const std::string& base_path);

void add_openai_routes(Server::Impl& s);
void add_lora_routes(Server::Impl& s);  // GET / POST /lora-adapters (serve/lora_adapters.h)
void add_api_routes(Server::Impl& s);
void add_ollama_routes(Server::Impl& s);
void add_embedding_routes(Server::Impl& s);  // /v1/embeddings, Ollama's /api/embed and /api/embeddings
void add_llama_server_routes(Server::Impl& s);
void add_ui_routes(Server::Impl& s);
void add_image_routes(Server::Impl& s);  // /v1/images/generations, /kvad/images (serve/images.h)

}  // namespace kvad::serve
