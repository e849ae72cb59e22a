// What every generation route shares, whatever its wire format (OpenAI's, Ollama's): a request
// checked against the loaded model and turned into prompt ids + options, its cache scope, and the
// accounting of its results into the request log and /metrics. Internal to src/serve.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "serve/gen_job.h"
#include "serve/server_impl.h"

namespace kvad::serve {

int64_t now_unix();

// Request -> prompt ids + options, all checks that need the model done here (HTTP thread).
struct Prepared {
  std::shared_ptr<const LoadedModel> model;
  std::vector<int32_t> prompt;
  GenerateOptions opts;
  int64_t context_length = 0;  // in force for this request
  ToolFamily tools = ToolFamily::None;  // how the answer's tool calls are read (None: they are not)
  std::vector<LoraUse> loras;  // the request's `lora`, else the server's current adapter scales
};

// Every check that needs the model (template, context, n, sampling), on the HTTP thread; throws
// HttpError naming the field.
Prepared prepare(Server::Impl& s, const GenRequest& r);

// The context length when this answer ended because the context filled, else 0.
int64_t context_filled(const GenerateResult& r, int64_t prompt_tokens, int64_t ctx);

// One choice's result into the request log and the metrics (the prompt counted with choice 0).
void account(Server::Impl& s, const GenerateResult& r);

// Usage of all n choices: the prompt once, the completions summed (OpenAI's accounting).
struct ChoicesUsage {
  Usage u;
  void add(const GenerateResult& r) {
    if (r.choice == 0) {
      u.prompt_tokens = r.prompt_tokens;
      u.cached_tokens = r.cached_tokens;
    }
    u.completion_tokens += (int64_t)r.tokens.size();
    u.draft_tokens += r.draft_tokens;
    u.draft_accepted += r.draft_accepted;
  }
};

// Whose cached prefixes a request may reuse (0 = the shared scope).
uint64_t cache_scope(Server::Impl& s, const httplib::Request& req, const GenRequest& r);

// A whole (non-streamed) answer's next event, waiting up to 200 ms; meanwhile a client that went
// away cancels the generation, as a stream's failed write does. False when nothing came.
bool next_event_or_cancel(Server::Impl& s, GenJob& job, GenEvent& ev);

// A stream's write; a failed one is a client gone: counted first, then the generation cancelled
// (whoever sees the engine free again also sees the disconnect in /metrics).
bool stream_write(Server::Impl& s, httplib::DataSink& sink, const std::string& data, GenJob& job, bool& client_gone);
// A stream's end (httplib's releaser). Unfinished without a failed write: httplib saw the socket
// close before calling the provider again and stopped the stream itself, a client gone too.
void stream_released(Server::Impl& s, GenJob& job, bool finished, bool client_gone);

}  // namespace kvad::serve
