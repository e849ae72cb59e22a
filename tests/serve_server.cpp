// kvad serve in-process on a tiny synthesized model, driven over loopback with httplib's client:
// the request lifecycle (stream, refuse when busy, disconnect cancels, shutdown mid-stream) runs
// under the sanitizers here; tests/serve/ drives the real binary with the openai client and Chromium.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include "models/synth.h"
#include "gpu_device.h"
#include "running_server.h"
#include "serve/catalog.h"
#include "serve/server.h"
#include "serve/serving_bench.h"
#include "test_support.h"

using namespace kvad;
using namespace std::chrono_literals;

namespace {

std::string tiny_model() {
  static std::string dir = [] {
    std::string d = test::temp_dir("serve-model");
    SynthOptions o;
    o.arch = "qwen2";
    o.preset = "tiny";
    o.out = d;
    SynthResult r = synthesize(o);
    std::string fx = test::source_path("tests/fixtures/tokenizers/" + r.tokenizer);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      atomic_write_file(join_path(d, f), read_file(join_path(fx, f)));
    return d;
  }();
  return dir;
}

using Running = test::RunningServer;

serve::ServeOptions server_options() {
  serve::ServeOptions o;
  o.model = tiny_model();
  o.port = 0;
  o.log_level = kvad::serve::LogLevel::Error;
  o.http_threads = 8;
  o.shutdown_grace = 0.2;
  return o;
}

Json post(httplib::Client& c, const std::string& path, const Json& body, int* status) {
  auto r = c.Post(path.c_str(), body.dump(), "application/json");
  if (!r) {
    *status = 0;
    return nullptr;
  }
  *status = r->status;
  return Json::parse(r->body, nullptr, false);
}

const Json kMessages = Json::array({{{"role", "user"}, {"content", "hello"}}});

// Starts a long stream on its own thread; reading stops (and the connection closes) once `stop`.
struct LongStream {
  LongStream(int port, std::atomic<bool>& stop, int max_tokens = 3000) {
    thread = std::thread([this, port, &stop, max_tokens] {
      httplib::Client c("127.0.0.1", port);
      c.set_read_timeout(120);
      httplib::Request req;
      req.method = "POST";
      req.path = "/v1/chat/completions";
      req.body = Json{{"messages", kMessages}, {"stream", true}, {"max_tokens", max_tokens}, {"seed", 1}}.dump();
      req.set_header("Content-Type", "application/json");
      req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
        std::lock_guard<std::mutex> lk(mu);
        text.append(d, n);
        return !stop.load();
      };
      c.send(req);
    });
  }
  void wait_for_content() {
    for (int i = 0; i < 2000; i++) {
      {
        std::lock_guard<std::mutex> lk(mu);
        if (text.find("\"content\":\"") != std::string::npos && text.find("\"content\":\"\"") != text.rfind("\"content\":\"")) return;
      }
      std::this_thread::sleep_for(10ms);
    }
    FAIL() << "the stream never produced content";
  }
  std::string got() {
    std::lock_guard<std::mutex> lk(mu);
    return text;
  }
  std::thread thread;
  std::mutex mu;
  std::string text;
};

}  // namespace

TEST(ServeServer, ChatAndCompletion) {
  Running s(server_options());
  auto c = s.client();
  int status = 0;
  Json r = post(c, "/v1/chat/completions", {{"messages", kMessages}, {"max_tokens", 5}, {"seed", 3}}, &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_LE(r["usage"]["completion_tokens"].get<int>(), 5);
  r = post(c, "/v1/completions", {{"prompt", "Once upon"}, {"max_tokens", 3}, {"logprobs", 2}}, &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["object"], "text_completion");
  r = post(c, "/v1/chat/completions", {{"model", "nope"}, {"messages", kMessages}}, &status);
  EXPECT_EQ(status, 404);
  EXPECT_EQ(r["error"]["code"], "model_not_found");
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("kvad_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"} 1"), std::string::npos) << m->body;
  auto ui = c.Get("/");
  ASSERT_TRUE(ui);
  EXPECT_EQ(ui->status, 200);
  EXPECT_NE(ui->body.find("<title>kvad</title>"), std::string::npos);
}

TEST(ServeServer, StreamEndsWithDoneAndUsage) {
  Running s(server_options());
  auto c = s.client();
  std::string body;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.body = Json{{"messages", kMessages}, {"stream", true}, {"stream_options", {{"include_usage", true}}}, {"max_tokens", 6}}.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    body.append(d, n);
    return true;
  };
  auto r = c.send(req);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  EXPECT_NE(body.find("\"role\":\"assistant\""), std::string::npos);
  EXPECT_NE(body.find("\"finish_reason\":\"length\""), std::string::npos);
  EXPECT_NE(body.find("\"completion_tokens\":6"), std::string::npos);
  EXPECT_EQ(body.substr(body.size() - 14), "data: [DONE]\n\n");
}

TEST(ServeServer, PastTheQueueBoundIsRefusedAtOnceAndDisconnectFreesTheEngine) {
  serve::ServeOptions o = server_options();
  o.parallel = 1;
  o.queue = 0;  // one request in flight at most: the second meets the bound
  Running s(o);
  std::atomic<bool> stop{false};
  LongStream ls(s.port, stop);
  ls.wait_for_content();
  auto c = s.client();
  auto t0 = std::chrono::steady_clock::now();
  auto r = c.Post("/v1/chat/completions", Json{{"messages", kMessages}, {"max_tokens", 2}}.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  stop = true;  // the client goes away mid-stream
  ls.thread.join();
  bool freed = false;
  for (int i = 0; i < 100 && !freed; i++) {
    std::this_thread::sleep_for(20ms);
    auto again = c.Post("/v1/chat/completions", Json{{"messages", kMessages}, {"max_tokens", 2}}.dump(), "application/json");
    freed = again && again->status == 200;
  }
  EXPECT_TRUE(freed) << "the engine was still busy 2 s after the client left";
  auto m = c.Get("/metrics");
  EXPECT_NE(m->body.find("kvad_client_disconnects_total 1"), std::string::npos);
  EXPECT_EQ(m->body.find("kvad_busy_rejections_total 0"), std::string::npos);
}

TEST(ServeServer, ShortRequestsAreAnsweredWhileALongStreamRuns) {
  serve::ServeOptions o = server_options();
  o.parallel = 4;
  Running s(o);
  std::atomic<bool> stop{false};
  LongStream ls(s.port, stop);
  ls.wait_for_content();
  auto c = s.client();
  for (int i = 0; i < 3; i++) {
    auto r = c.Post("/v1/chat/completions", Json{{"messages", kMessages}, {"max_tokens", 4}, {"seed", i}}.dump(),
                    "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
  }
  std::string text = ls.got();
  EXPECT_EQ(text.find("[DONE]"), std::string::npos);  // the long stream is still going: they ran beside it
  auto st = c.Get("/kvad/stats");
  ASSERT_TRUE(st);
  Json j = Json::parse(st->body);
  EXPECT_GE(j["kv_blocks"]["used"].get<int64_t>(), 1);
  EXPECT_EQ(j["engine"]["parallel"], 4);
  stop = true;
  ls.thread.join();
  // Once every client has gone, every block is back in the pool.
  bool drained = false;
  for (int i = 0; i < 100 && !drained; i++) {
    std::this_thread::sleep_for(20ms);
    Json k = Json::parse(c.Get("/kvad/stats")->body);
    drained = k["kv_blocks"]["used"].get<int64_t>() == 0 && k["engine"]["running"].get<int64_t>() == 0;
  }
  EXPECT_TRUE(drained);
}

TEST(ServeServer, AQ8KvCacheStoresAQuarterAndSaysSo) {
  // --kv-type q8: /kvad/stats names the type and the bytes per token the format defines (int8 K and
  // V per value plus a 4-byte scale per head and position), and a request is served through it.
  serve::ServeOptions o = server_options();
  o.kv_type = kernels::KvType::Q8;
  Running s(o);
  auto c = s.client();
  int status = 0;
  Json r = post(c, "/v1/chat/completions", Json{{"messages", kMessages}, {"max_tokens", 5}, {"seed", 1}}, &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["usage"]["completion_tokens"], 5);
  Json st = Json::parse(c.Get("/kvad/stats")->body);
  EXPECT_EQ(st["kv_type"], "q8");
  const Json& m = st["model"];
  int64_t per_token = 2 * m["layers"].get<int64_t>() * m["kv_heads"].get<int64_t>() * (m["head_dim"].get<int64_t>() + 4);
  EXPECT_EQ(st["kv_bytes_per_token"].get<int64_t>(), per_token);
}

TEST(ServeServer, ModelsReportTheContextInForce) {
  // --ctx 64: /v1/models says 64 (what a request is checked against), and the model's own beside it.
  serve::ServeOptions o = server_options();
  o.ctx = 64;
  Running s(o);
  auto c = s.client();
  Json list = Json::parse(c.Get("/v1/models")->body);
  ASSERT_EQ(list["data"].size(), 1u);
  const Json& m = list["data"][0];
  EXPECT_EQ(m["context_length"], 64);
  EXPECT_GT(m["model_context_length"].get<int64_t>(), 64);
  Json one = Json::parse(c.Get(("/v1/models/" + m["id"].get<std::string>()).c_str())->body);
  EXPECT_EQ(one["context_length"], 64);
}

TEST(ServeServer, TheServingBenchmarkMeasuresWhatItSent) {
  serve::ServeOptions o = server_options();
  o.parallel = 4;
  Running s(o);
  serve::ServingBenchParams p;
  p.port = s.port;
  p.num_prompts = 6;
  p.input_len = 20;
  p.output_len = 7;
  p.concurrency = 3;
  serve::ServingBenchResult r = serve::run_serving_bench(p);
  EXPECT_EQ(r.completed, 6) << r.first_error;
  EXPECT_EQ(r.failed, 0);
  EXPECT_EQ(r.total_input, 6 * 20);
  EXPECT_EQ(r.total_output, 6 * 7);  // ignore_eos: exactly output_len each, counted by the server's usage
  EXPECT_GT(r.ttft.median, 0);
  EXPECT_LE(r.ttft.median, r.e2el.median);
  EXPECT_LE(r.itl.median, r.itl.p99);
  EXPECT_GT(r.tpot.mean, 0);
  EXPECT_NEAR(r.output_throughput, 42 / r.duration_s, 1e-6);
  Json j = r.to_json();
  for (const char* k : {"mean_ttft_ms", "median_tpot_ms", "p99_itl_ms", "mean_e2el_ms", "request_throughput"})
    EXPECT_TRUE(j.contains(k)) << k;
  // A server that is not there: every request fails, with the reason.
  p.port = 1;
  serve::ServingBenchResult none = serve::run_serving_bench(p);
  EXPECT_EQ(none.completed, 0);
  EXPECT_NE(none.first_error.find("connection"), std::string::npos) << none.first_error;
}

TEST(ServeServer, CachedPrefixesAreScopedSoOneClientCannotProbeAnothersPrompt) {
  Running s(server_options());
  auto c = s.client();
  std::string secret;
  for (int i = 0; i < 40; i++) secret += "secret" + std::to_string(i) + " ";
  auto cached = [&](const std::string& salt) {
    Json body = {{"prompt", secret}, {"max_tokens", 1}};
    if (!salt.empty()) body["cache_salt"] = salt;
    int status = 0;
    Json r = post(c, "/v1/completions", body, &status);
    EXPECT_EQ(status, 200) << r.dump();
    return r["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
  };
  EXPECT_EQ(cached("alice"), 0);
  EXPECT_GT(cached("alice"), 0);  // the same salt reuses its own prompt
  EXPECT_EQ(cached("mallory"), 0);  // another salt learns nothing about alice's prompt
  EXPECT_EQ(cached(""), 0);         // nor does a client without a salt
  EXPECT_GT(cached(""), 0);         // which reuses its own
  int status = 0;
  post(c, "/v1/completions", Json{{"prompt", "x"}, {"cache_salt", 5}}, &status);
  EXPECT_EQ(status, 400);
}

TEST(ServeServer, ANonStreamingClientThatLeavesCancelsItsGeneration) {
  Running s(server_options());
  {
    httplib::Client gone("127.0.0.1", s.port);
    gone.set_read_timeout(0, 400000);  // gives up after 0.4 s and closes the connection
    auto r = gone.Post("/v1/completions", Json{{"prompt", "hello"}, {"max_tokens", 3000}, {"ignore_eos", true}}.dump(),
                       "application/json");
    EXPECT_FALSE(r);
  }
  auto c = s.client();
  bool freed = false;
  for (int i = 0; i < 150 && !freed; i++) {
    std::this_thread::sleep_for(20ms);
    Json k = Json::parse(c.Get("/kvad/stats")->body);
    freed = k["engine"]["running"].get<int64_t>() == 0 && k["kv_blocks"]["used"].get<int64_t>() == 0;
  }
  EXPECT_TRUE(freed) << "the engine still generated for a client that left 3 s ago";
  auto m = c.Get("/metrics");
  EXPECT_NE(m->body.find("kvad_client_disconnects_total 1"), std::string::npos);
}

TEST(ServeServer, StopCutsAStreamCleanly) {
  std::atomic<bool> never{false};
  auto running = std::make_unique<Running>(server_options());
  LongStream ls(running->port, never);
  ls.wait_for_content();
  running.reset();  // stop(): grace 0.2 s, then the stream is cut with an error event and [DONE]
  ls.thread.join();
  std::string text = ls.got();
  EXPECT_NE(text.find("shutting_down"), std::string::npos) << text.substr(text.size() > 300 ? text.size() - 300 : 0);
  EXPECT_EQ(text.substr(text.size() - 14), "data: [DONE]\n\n");
}

TEST(ServeServer, LimitsAndKeys) {
  serve::ServeOptions o = server_options();
  o.api_key = "k";
  o.max_body = 4096;
  o.ctx = 32;
  Running s(o);
  auto c = s.client();
  auto r = c.Post("/v1/chat/completions", Json{{"messages", kMessages}}.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  c.set_bearer_token_auth("k");
  r = c.Post("/v1/chat/completions", std::string(10000, ' '), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_NE(r->body.find("4096 bytes"), std::string::npos);
  std::string long_text;
  for (int i = 0; i < 100; i++) long_text += "word ";
  r = c.Post("/v1/chat/completions", Json{{"messages", Json::array({{{"role", "user"}, {"content", long_text}}})}}.dump(),
             "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("maximum context length is 32 tokens"), std::string::npos) << r->body;
  // Tokenizing stopped at the context: the error counts "more than 32", not all 100+ tokens.
  EXPECT_NE(r->body.find("resulted in more than 32 tokens"), std::string::npos) << r->body;
  // --ctx caps generation too: the answer stops at the cap with "length".
  int status = 0;
  Json j = post(c, "/v1/chat/completions", {{"messages", kMessages}, {"max_tokens", 100}}, &status);
  ASSERT_EQ(status, 200) << j.dump();
  EXPECT_EQ(j["usage"]["total_tokens"].get<int>(), 32);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
}

namespace {

// Streams a chat request; returns its SSE body.
std::string stream_body(httplib::Client& c, const Json& body) {
  std::string out;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    out.append(d, n);
    return true;
  };
  auto r = c.send(req);
  EXPECT_TRUE(r && r->status == 200);
  return out;
}

// The chunk of a stream whose choice has a finish_reason.
Json final_chunk(const std::string& sse) {
  for (size_t at = sse.find("data: {"); at != std::string::npos; at = sse.find("data: {", at + 1)) {
    Json j = Json::parse(sse.substr(at + 6, sse.find("\n\n", at) - at - 6));
    if (!j["choices"].empty() && !j["choices"][0]["finish_reason"].is_null()) return j;
  }
  ADD_FAILURE() << "no finishing chunk in " << sse;
  return nullptr;
}

}  // namespace

TEST(ServeServer, AnAnswerThatFillsTheContextSaysSoBesideLength) {
  // --ctx 32: max_tokens 100 cannot fit, so the answer ends where the context does; max_tokens 3
  // ends the answer long before. Both are "length"; only the first carries finish_details.
  serve::ServeOptions o = server_options();
  o.ctx = 32;
  Running s(o);
  auto c = s.client();
  int status = 0;
  const Json full_req = {{"messages", kMessages}, {"max_tokens", 100}, {"ignore_eos", true}, {"seed", 1}};
  Json j = post(c, "/v1/chat/completions", full_req, &status);
  ASSERT_EQ(status, 200) << j.dump();
  const Json& choice = j["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["total_tokens"], 32);
  ASSERT_TRUE(choice.contains("finish_details")) << j.dump();
  EXPECT_EQ(choice["finish_details"]["type"], "context_full");
  EXPECT_EQ(choice["finish_details"]["context_length"], 32);

  Json short_req = full_req;
  short_req["max_tokens"] = 3;
  j = post(c, "/v1/chat/completions", short_req, &status);
  ASSERT_EQ(status, 200) << j.dump();
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
  EXPECT_FALSE(j["choices"][0].contains("finish_details")) << j.dump();

  // The same in a stream: the detail rides on the chunk that carries finish_reason.
  Json streamed = full_req;
  streamed["stream"] = true;
  Json last = final_chunk(stream_body(c, streamed));
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(last["choices"][0]["finish_details"], (Json{{"type", "context_full"}, {"context_length", 32}}));
  streamed["max_tokens"] = 3;
  last = final_chunk(stream_body(c, streamed));
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_FALSE(last["choices"][0].contains("finish_details")) << last.dump();
}

TEST(ServeServer, ScoreBenchAndModelsApi) {
  Running s(server_options());
  auto c = s.client();
  int status = 0;
  Json r = post(c, "/kvad/score", {{"text", "The cat sat on the mat. The cat sat on the mat."}}, &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_GT(r["perplexity"].get<double>(), 1.0);
  EXPECT_GT(r["bits_per_char"].get<double>(), 0.0);
  r = post(c, "/kvad/bench/model", {{"prompt_lengths", {4, 16}}, {"decode_tokens", 4}}, &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["rows"].size(), 2u);
  EXPECT_GT(r["rows"][1]["decode_tok_s"].get<double>(), 0.0);
  auto m = c.Get("/kvad/models");
  ASSERT_TRUE(m);
  Json models = Json::parse(m->body);
  ASSERT_FALSE(models["models"].empty());
  EXPECT_TRUE(models["models"][0]["loaded"].get<bool>());
  EXPECT_EQ(models["models"][0]["parameters"], models["loaded"]["parameters"]);
  r = post(c, "/kvad/models/load", {{"name", "/no/such/model"}}, &status);
  EXPECT_EQ(status, 400);
  r = post(c, "/kvad/models/load", {{"name", tiny_model()}}, &status);
  EXPECT_EQ(status, 200) << r.dump();
}

// GET /kvad/models/loading (what the Models page polls while its load request waits): the model,
// the stage and the count of tensors read while a load quantises its checkpoint; {} otherwise.
TEST(ServeServer, ALoadsProgressIsReadableWhileItRuns) {
  namespace fs = std::filesystem;
  serve::ServeOptions o = server_options();
  o.quant = "q8";
  Running s(o);
  auto c = s.client();
  auto idle = c.Get("/kvad/models/loading");
  ASSERT_TRUE(idle);
  EXPECT_EQ(Json::parse(idle->body), Json::object());
  // A copy under another path has no .nq cache yet: its load reads and quantises the checkpoint.
  const std::string copy = test::temp_dir("serve-load-progress");
  for (const auto& f : fs::directory_iterator(tiny_model())) fs::copy_file(f.path(), fs::path(copy) / f.path().filename());
  std::atomic<bool> loaded{false};
  std::vector<Json> seen;
  std::thread poller([&] {
    httplib::Client pc("127.0.0.1", s.port);
    while (!loaded) {
      auto r = pc.Get("/kvad/models/loading");
      if (r && r->status == 200 && r->body != "{}") seen.push_back(Json::parse(r->body));
    }
  });
  int status = 0;
  Json r = post(c, "/kvad/models/load", {{"name", copy}}, &status);
  loaded = true;
  poller.join();
  ASSERT_EQ(status, 200) << r.dump();
  ASSERT_FALSE(seen.empty()) << "the load was never seen in progress";
  int64_t counted = 0;
  for (const Json& p : seen) {
    EXPECT_EQ(p["name"], copy);
    if (p["total"].get<int64_t>() == 0) continue;  // started, no tensor read yet
    EXPECT_EQ(p["stage"], "reading the checkpoint, to q8") << p.dump();
    EXPECT_EQ(p["unit"], "tensors");
    EXPECT_GE(p["done"].get<int64_t>(), counted) << "the count went back";
    EXPECT_LE(p["done"].get<int64_t>(), p["total"].get<int64_t>());
    counted = p["done"];
  }
  EXPECT_GT(counted, 0) << "no tensor was counted while the load ran";
  EXPECT_EQ(Json::parse(c.Get("/kvad/models/loading")->body), Json::object());
}

TEST(ServeServer, AModelsSizeIsItsWeightsNotTheOptimizerStateBesideThem) {
  // kvad train saves optimizer.safetensors (Adam's m and v: twice the weights) in the model's
  // folder; the Models page and kvad ls count the model, so neither its bytes nor its tensors.
  namespace fs = std::filesystem;
  std::string dir = test::temp_dir("trained-like");
  for (const auto& f : fs::directory_iterator(tiny_model())) fs::copy_file(f.path(), fs::path(dir) / f.path().filename());
  const uint64_t weights = fs::file_size(fs::path(dir) / "model.safetensors");
  serve::ModelEntry before = serve::describe_model(dir, "m", "folder");
  atomic_write_file(join_path(dir, "optimizer.safetensors"), read_file(join_path(dir, "model.safetensors")) +
                                                                 read_file(join_path(dir, "model.safetensors")));
  serve::ModelEntry after = serve::describe_model(dir, "m", "folder");
  EXPECT_EQ(after.bytes, weights);
  EXPECT_EQ(after.parameters, before.parameters);
  EXPECT_GT(after.parameters, 0);
}

// --spec ngram / --draft: the answer is the plain server's, token for token (greedy), and the
// drafts are reported as OpenAI's predicted-token counts, llama-server's timings and /metrics.
TEST(ServeServer, SpeculationChangesNothingButTheCountsItReports) {
  const Json body = {{"prompt", "one two three four one two three four one two"}, {"max_tokens", 40},
                     {"temperature", 0}};
  auto answer = [&](const serve::ServeOptions& o, Json* metrics_text) {
    Running s(o);
    auto c = s.client();
    int status = 0;
    Json j = post(c, "/v1/completions", body, &status);
    EXPECT_EQ(status, 200) << j.dump();
    // The engine publishes its counters after the step that ended the answer (refresh_stats), so a
    // scrape right after the response may precede them by that step: wait for the draft counter.
    for (int i = 0; metrics_text && i < 100; i++) {
      *metrics_text = c.Get("/metrics")->body;
      const Json& u = j["usage"];
      if (!u.contains("completion_tokens_details")) break;
      std::string want = "kvad_draft_accepted_total " + std::to_string(u["completion_tokens_details"]["accepted_prediction_tokens"].get<int64_t>());
      if (metrics_text->get<std::string>().find(want) != std::string::npos) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return j;
  };
  Json plain = answer(server_options(), nullptr);
  for (const char* kind : {"ngram", "draft"}) {
    SCOPED_TRACE(kind);
    serve::ServeOptions o = server_options();
    if (std::string(kind) == "ngram") o.speculative.spec = "ngram";
    else o.speculative.draft = tiny_model(), o.speculative.draft_quant = "q8", o.speculative.draft_p_min = 0;
    Json metrics;
    Json spec = answer(o, &metrics);
    EXPECT_EQ(spec["choices"][0]["text"], plain["choices"][0]["text"]);
    const Json& details = spec["usage"]["completion_tokens_details"];
    int64_t kept = details["accepted_prediction_tokens"], rejected = details["rejected_prediction_tokens"];
    EXPECT_GT(kept + rejected, 0);
    EXPECT_EQ(spec["timings"]["draft_n"].get<int64_t>(), kept + rejected);
    EXPECT_EQ(spec["timings"]["draft_n_accepted"].get<int64_t>(), kept);
    EXPECT_NE(metrics.get<std::string>().find("kvad_draft_accepted_total " + std::to_string(kept)), std::string::npos);
    EXPECT_FALSE(plain["usage"].contains("completion_tokens_details"));
  }
  // A draft with another vocabulary is refused at start, naming it.
  serve::ServeOptions bad = server_options();
  std::string other = test::temp_dir("serve-other-draft");
  test::RunResult r = test::run_kvad("synth --arch gpt2 --preset tiny-v512 --out " + other + " --force");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  bad.speculative.draft = other;
  try {
    Running s(bad);
    FAIL() << "started with a draft of another tokenizer";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("same tokenizer"), std::string::npos) << e.what();
  }
}

// The server on the GPU backend (lavapipe, named): the same engine loop batches concurrent
// requests on the device, and each answer is the one it gets alone (the device's products do not
// depend on which rows share a batch); a single greedy answer is the CPU server's.
TEST(ServeServer, ContinuousBatchingOnTheGpu) {
  KVAD_NEED_GPU(device);
  serve::ServeOptions o = server_options();
  o.device = device;
  o.parallel = 4;
  Running gpu(o);
  const std::vector<std::string> prompts = {"Once upon", "The quick brown fox", "hello", "In the beginning was"};
  auto ask = [](Running& s, const std::string& p) {
    auto c = s.client();
    int status = 0;
    Json r = post(c, "/v1/completions", {{"prompt", p}, {"max_tokens", 10}, {"temperature", 0}}, &status);
    EXPECT_EQ(status, 200) << r.dump();
    return status == 200 ? r["choices"][0]["text"].get<std::string>() : std::string("(failed)");
  };
  std::vector<std::string> together(prompts.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); i++) clients.emplace_back([&, i] { together[i] = ask(gpu, prompts[i]); });
  for (auto& t : clients) t.join();
  for (size_t i = 0; i < prompts.size(); i++) EXPECT_EQ(ask(gpu, prompts[i]), together[i]) << prompts[i];
  Running cpu(server_options());
  EXPECT_EQ(ask(cpu, prompts[0]), together[0]);
}
