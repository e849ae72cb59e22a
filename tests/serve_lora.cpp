// LoRA adapters in the server (serve/lora_adapters.h): --lora at start, GET / POST /lora-adapters
// as llama-server has them, the per-request `lora` field with its limits, and requests with
// different adapters running at once answering exactly what each gets alone. Then the Training
// page's LoRA jobs (ServeTrainLora): a real `kvad train --lora` child on the shipped default model
// whose adapter joins the server's list, and the job fields' limits.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <thread>

#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include <fmt/format.h>
#include "running_server.h"
#include "serve/server.h"
#include "test_support.h"

using namespace kvad;

namespace {

// The base the qwen2 golden adapter was made for (tests/golden/lora), with its tokenizer.
std::string base_model() {
  static std::string dir = [] {  // the CLI's synth, which also writes the trimmed tokenizer
    Json s = read_json_file(test::source_path("tests/golden/lora/lora.json"))["synth"];
    std::string out = test::temp_dir("serve-lora-model");
    test::RunResult r = test::run_kvad(fmt::format("synth --arch qwen2 --preset {} --seed {} --std {} --norm-jitter {} --out {} --force",
                                                   s["preset"].get<std::string>(), s["seed"].get<int>(), s["std"].get<double>(),
                                                   s["norm_jitter"].get<double>(), out));
    if (r.exit_code != 0) throw std::runtime_error(r.err);
    return out;
  }();
  return dir;
}

const std::string kAdapter = test::source_path("tests/golden/lora/qwen2");

serve::ServeOptions options(std::vector<std::string> loras) {
  serve::ServeOptions o;
  o.model = base_model();
  o.port = 0;
  o.log_level = serve::LogLevel::Error;
  o.http_threads = 8;
  o.shutdown_grace = 0.2;
  o.loras = std::move(loras);
  return o;
}

Json send(httplib::Client& c, const std::string& path, const Json& body, int* status) {
  auto r = c.Post(path.c_str(), body.dump(), "application/json");
  *status = r ? r->status : 0;
  return r ? Json::parse(r->body, nullptr, false) : Json();
}

// A greedy completion's text and per-token log-probabilities, with `lora` when given.
struct Answer {
  std::string text;
  std::vector<double> logprobs;
};
Answer complete(int port, const Json* lora) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60);
  Json body = {{"prompt", {17, 301, 5, 77}}, {"max_tokens", 8}, {"temperature", 0}, {"logprobs", 1}, {"ignore_eos", true}};
  if (lora) body["lora"] = *lora;
  int status = 0;
  Json r = send(c, "/v1/completions", body, &status);
  EXPECT_EQ(status, 200) << r.dump();
  Answer a;
  if (status != 200) return a;
  a.text = r["choices"][0]["text"];
  for (const Json& x : r["choices"][0]["logprobs"]["token_logprobs"]) a.logprobs.push_back(x.get<double>());
  return a;
}

void expect_same(const Answer& a, const Answer& b, const char* what) {
  EXPECT_EQ(a.text, b.text) << what;
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size()) << what;
  for (size_t i = 0; i < a.logprobs.size(); i++) EXPECT_NEAR(a.logprobs[i], b.logprobs[i], 1e-4) << what << " token " << i;
}

}  // namespace

TEST(ServeLora, ListRescaleAndChoosePerRequest) {
  test::RunningServer s(options({kAdapter + ":0.5"}));
  auto c = s.client();
  auto list = c.Get("/lora-adapters");
  ASSERT_TRUE(list);
  Json l = Json::parse(list->body);
  ASSERT_EQ(l.size(), 1u) << l.dump();
  EXPECT_EQ(l[0]["id"], 0);
  EXPECT_EQ(l[0]["path"], kAdapter);
  EXPECT_EQ(l[0]["scale"], 0.5);

  const Json none = Json::array(), half = {{{"id", 0}, {"scale", 0.5}}}, full = {{{"id", 0}, {"scale", 1}}};
  Answer by_default = complete(s.port, nullptr), at_half = complete(s.port, &half), base = complete(s.port, &none);
  expect_same(by_default, at_half, "the default is --lora's scale");
  EXPECT_NE(base.logprobs, at_half.logprobs) << "the adapter changes the answer";

  int status = 0;
  Json r = send(c, "/lora-adapters", full, &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(Json::parse(c.Get("/lora-adapters")->body)[0]["scale"], 1.0);
  expect_same(complete(s.port, nullptr), complete(s.port, &full), "after POST the default is the new scale");
  send(c, "/lora-adapters", none, &status);  // llama-server's reading: left out = 0
  ASSERT_EQ(status, 200);
  expect_same(complete(s.port, nullptr), base, "an empty list turns the adapter off");

  // Requests with different adapters at once share engine steps, each answered as if alone.
  Answer together[3];
  const Json* asked[3] = {&none, &half, &full};
  std::vector<std::thread> ts;
  for (int i = 0; i < 3; i++) ts.emplace_back([&, i] { together[i] = complete(s.port, asked[i]); });
  for (auto& t : ts) t.join();
  expect_same(together[0], base, "base, batched");
  expect_same(together[1], at_half, "0.5, batched");
  expect_same(together[2], complete(s.port, &full), "1.0, batched");
}

TEST(ServeLora, BadLoraFieldsAreRefused) {
  test::RunningServer s(options({kAdapter}));
  auto c = s.client();
  auto refused = [&](const std::string& path, const Json& body, const std::string& part) {
    int status = 0;
    Json r = send(c, path, body, &status);
    EXPECT_EQ(status, 400) << r.dump();
    EXPECT_NE(r.dump().find(part), std::string::npos) << r.dump();
  };
  auto with_lora = [](Json lora) { return Json{{"prompt", "hi"}, {"max_tokens", 1}, {"lora", std::move(lora)}}; };
  refused("/v1/completions", with_lora({{{"id", 3}, {"scale", 1}}}), "adapter id 3 does not exist");
  refused("/v1/completions", with_lora({{"id", 0}}), "must be a list");
  refused("/v1/completions", with_lora({{{"id", 0}, {"scale", 1e6}}}), "scale");
  refused("/v1/completions", with_lora({{{"id", 0}}, {{"id", 0}}}), "twice");
  refused("/v1/chat/completions",
          {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"lora", {{{"scale", 1}}}}}, "'id'");
  refused("/lora-adapters", {{"id", 0}}, "must be a list");
  refused("/lora-adapters", {{{"id", -1}, {"scale", 1}}}, "id");
}

TEST(ServeLora, TheListIsBehindTheApiKey) {
  serve::ServeOptions o = options({kAdapter});
  o.api_key = "sekrit";
  test::RunningServer s(o);
  auto c = s.client();
  EXPECT_EQ(c.Get("/lora-adapters")->status, 401);
  EXPECT_EQ(c.Post("/lora-adapters", "[]", "application/json")->status, 401);
  httplib::Headers h = {{"Authorization", "Bearer sekrit"}};
  EXPECT_EQ(c.Get("/lora-adapters", h)->status, 200);
}

TEST(ServeLora, AnAdapterThatDoesNotFitStopsTheStart) {
  std::string dir = test::temp_dir("serve-lora-bad");
  EXPECT_THROW(test::RunningServer s(options({dir})), Error);  // no adapter_config.json
}

// ---- The Training page's LoRA jobs (serve/train_jobs.h): `kvad train --lora` children of the
// server whose adapter joins the server's list when its base is loaded.

namespace {

const std::string kKjv = test::source_path("models/kvad-kjv");  // the shipped default model (GPT-2, characters)

// A few KB of plain text in the default model's alphabet.
std::string corpus() {
  static const char* words[] = {"the", "lord", "said", "unto", "moses", "and", "aaron", "go", "forth", "into",
                                "land", "which", "i", "shall", "give", "thee", "behold", "people"};
  std::string t;
  uint32_t x = 12345;
  for (int i = 0; i < 500; i++) {
    x = x * 1664525u + 1013904223u;
    t += words[(x >> 16) % 18];
    t += i % 12 == 11 ? ".\n" : " ";
  }
  return t;
}

// A server on `model` whose training jobs run this build's kvad, with kvad's store in a fresh folder.
struct TrainServer {
  explicit TrainServer(const std::string& model, std::vector<std::string> model_dirs = {}, std::string key = "")
      : home(test::temp_dir("serve-train-lora-home")) {
    setenv("KVAD_HOME", home.c_str(), 1);  // the children inherit it
    serve::ServeOptions o = options({});
    o.model = model;
    o.model_dirs = std::move(model_dirs);
    o.self_exe = KVAD_BINARY;
    o.api_key = std::move(key);
    s = std::make_unique<test::RunningServer>(o);
  }
  ~TrainServer() {
    s.reset();
    unsetenv("KVAD_HOME");
  }
  std::string home;
  std::unique_ptr<test::RunningServer> s;
};

Json lora_job(const std::string& name, const std::string& base) {
  return {{"kind", "lora"}, {"name", name}, {"base", base}, {"text", corpus()}, {"rank", 4},
          {"steps", 12},    {"batch", 4},   {"context", 48}};
}

// Starts a job and waits for it to end (2 minutes at most); returns its details.
Json run_job(httplib::Client& c, const Json& body) {
  int status = 0;
  Json started = send(c, "/kvad/train", body, &status);
  EXPECT_EQ(status, 200) << started.dump();
  for (int i = 0; i < 1200; i++) {
    Json cur = Json::parse(c.Get("/kvad/train")->body)["current"];
    if (cur["state"] != "running") return cur;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ADD_FAILURE() << "the job did not finish in 2 minutes";
  return Json::parse(c.Get("/kvad/train")->body)["current"];
}

std::vector<double> chat_logprobs(httplib::Client& c, const Json& lora) {
  int status = 0;
  Json r = send(c, "/v1/chat/completions",
                {{"messages", {{{"role", "user"}, {"content", "the lord"}}}}, {"max_tokens", 12}, {"temperature", 0},
                 {"logprobs", true}, {"lora", lora}},
                &status);
  EXPECT_EQ(status, 200) << r.dump();
  std::vector<double> out;
  if (status == 200)
    for (const Json& t : r["choices"][0]["logprobs"]["content"]) out.push_back(t["logprob"].get<double>());
  return out;
}

}  // namespace

TEST(ServeTrainLora, AJobOnTheLoadedModelAddsItsAdapter) {
  TrainServer t(kKjv);
  auto c = t.s->client();
  Json job = run_job(c, lora_job("kjv-style", kKjv));
  ASSERT_EQ(job["state"], "finished") << job.dump(1);
  EXPECT_EQ(job["kind"], "lora");
  // The base's own validation point comes first, at step 0; the adapter's follow.
  ASSERT_GE(job["val"].size(), 2u) << job.dump();
  EXPECT_EQ(job["val"][0][0], 0);
  EXPECT_EQ(job["summary"]["base_val_bpc"].get<double>(), std::round(job["val"][0][2].get<double>() * 1e4) / 1e4);
  ASSERT_TRUE(job["adapter"]["loaded"].get<bool>()) << job["adapter"].dump();
  const int64_t id = job["adapter"]["id"];

  Json list = Json::parse(c.Get("/lora-adapters")->body);
  ASSERT_EQ(list.size(), 1u) << list.dump();
  EXPECT_EQ(list[0]["id"], id);
  EXPECT_EQ(list[0]["path"], join_path(join_path(t.home, "adapters"), "kjv-style"));
  EXPECT_EQ(list[0]["scale"], 0.0) << "added off: requests that name no adapter still get the base";

  Json stored = Json::parse(c.Get("/kvad/adapters")->body)["adapters"];
  ASSERT_EQ(stored.size(), 1u) << stored.dump();
  EXPECT_EQ(stored[0]["name"], "kjv-style");
  EXPECT_EQ(stored[0]["id"], id);
  EXPECT_EQ(stored[0]["val_bpc"], job["summary"]["val_bpc"]);
  EXPECT_EQ(stored[0]["base_val_bpc"], job["summary"]["base_val_bpc"]);

  const Json none = Json::array(), on = {{{"id", id}, {"scale", 1}}};
  std::vector<double> base = chat_logprobs(c, none), adapted = chat_logprobs(c, on);
  ASSERT_FALSE(base.empty());
  EXPECT_NE(base, adapted) << "the adapter changes the answer";

  // Loaded again from the Models page, the base comes with the store's adapter.
  int status = 0;
  Json r = send(c, "/kvad/models/load", {{"name", kKjv}}, &status);
  ASSERT_EQ(status, 200) << r.dump();
  list = Json::parse(c.Get("/lora-adapters")->body);
  ASSERT_EQ(list.size(), 1u) << list.dump();
  EXPECT_EQ(chat_logprobs(c, {{{"id", 0}, {"scale", 1}}}), adapted);

  // Retrained under its name (replace), with the form's other fields: the new adapter takes the
  // old one's place -- same id, the scale it was given -- and is what runs.
  ASSERT_EQ(send(c, "/lora-adapters", {{{"id", 0}, {"scale", 0.5}}}, &status).dump(), R"({"success":true})");
  Json again = lora_job("kjv-style", kKjv);
  again["replace"] = true;
  again["targets"] = "c_attn";
  again["rslora"] = true;
  again["lr"] = 0.003;
  Json job2 = run_job(c, again);
  ASSERT_EQ(job2["state"], "finished") << job2.dump(1);
  EXPECT_EQ(job2["params"]["targets"], "c_attn");
  EXPECT_EQ(job2["adapter"]["id"], 0) << job2["adapter"].dump();
  list = Json::parse(c.Get("/lora-adapters")->body);
  ASSERT_EQ(list.size(), 1u) << list.dump();
  EXPECT_EQ(list[0]["scale"], 0.5);
  EXPECT_NE(chat_logprobs(c, {{{"id", 0}, {"scale", 1}}}), adapted) << "the retrained adapter runs, not the old one";
  Json config = read_json_file(join_path(join_path(join_path(t.home, "adapters"), "kjv-style"), "adapter_config.json"));
  EXPECT_EQ(config["target_modules"], Json::array({"c_attn"})) << config.dump();
  EXPECT_EQ(config["use_rslora"], true);

  // A server started on the base with --model alone offers the store's adapter for it too, off.
  serve::ServeOptions o = options({});
  o.model = kKjv;
  test::RunningServer other(o);
  auto c2 = other.client();
  list = Json::parse(c2.Get("/lora-adapters")->body);
  ASSERT_EQ(list.size(), 1u) << list.dump();
  EXPECT_EQ(list[0]["path"], join_path(join_path(t.home, "adapters"), "kjv-style"));
  EXPECT_EQ(list[0]["scale"], 0.0);
}

TEST(ServeTrainLora, AnAdapterForAnotherBaseSaysHowToUseIt) {
  TrainServer t(kKjv, {base_model()});
  auto c = t.s->client();
  Json body = lora_job("for-qwen", base_model());
  body["steps"] = 3;
  Json job = run_job(c, body);
  ASSERT_EQ(job["state"], "finished") << job.dump(1);
  EXPECT_FALSE(job["adapter"]["loaded"].get<bool>());
  std::string msg = job["adapter"]["message"];
  EXPECT_NE(msg.find(fmt::format("kvad serve --model {} --lora for-qwen", base_model())), std::string::npos) << msg;
  EXPECT_EQ(Json::parse(c.Get("/lora-adapters")->body).size(), 0u);
  EXPECT_EQ(Json::parse(c.Get("/kvad/adapters")->body)["adapters"][0]["id"], nullptr);
}

TEST(ServeTrainLora, BadJobsAreRefusedNamingTheField) {
  TrainServer t(kKjv);
  auto c = t.s->client();
  auto refused = [&](Json body, int want, const std::string& param) {
    int status = 0;
    Json r = send(c, "/kvad/train", body, &status);
    EXPECT_EQ(status, want) << body.dump().substr(0, 200) << " -> " << r.dump();
    EXPECT_EQ(r["error"]["param"], param) << r.dump();
  };
  auto with = [](const char* k, Json v) {
    Json b = lora_job("x", kKjv);
    b[k] = std::move(v);
    return b;
  };
  refused(with("kind", "qlora"), 400, "kind");
  refused(with("name", "../escape"), 400, "name");
  refused(with("name", 7), 400, "name");
  refused(with("text", "too short"), 400, "text");
  refused(with("rank", 0), 400, "rank");
  refused(with("rank", 100000), 400, "rank");
  refused(with("alpha", "big"), 400, "alpha");
  refused(with("steps", 0), 400, "steps");
  refused(with("batch", 1000), 400, "batch");
  refused(with("context", 4), 400, "context");
  refused(with("replace", "yes"), 400, "replace");
  refused(with("targets", "q_proj;rm -rf"), 400, "targets");
  refused(with("targets", ""), 400, "targets");
  refused(with("targets", "a,,b"), 400, "targets");
  refused(with("lr", 5), 400, "lr");
  refused(with("rslora", "on"), 400, "rslora");
  Json no_base = lora_job("x", kKjv);
  no_base.erase("base");
  refused(no_base, 400, "base");
  refused(with("base", "no-such-model"), 404, "base");
  // Only what the Models page lists: a folder of the source tree, a file, a path around the loaded model.
  refused(with("base", test::source_path("models")), 404, "base");
  refused(with("base", "/etc/passwd"), 404, "base");
  refused(with("base", kKjv + "/../kvad-kjv/."), 404, "base");
  EXPECT_EQ(Json::parse(c.Get("/kvad/train")->body)["jobs"].size(), 0u) << "nothing was started";
}

TEST(ServeTrainLora, JobsAndAdaptersAreBehindTheApiKey) {
  TrainServer t(kKjv, {}, "sekrit");
  auto c = t.s->client();
  EXPECT_EQ(c.Post("/kvad/train", lora_job("x", kKjv).dump(), "application/json")->status, 401);
  EXPECT_EQ(c.Get("/kvad/adapters")->status, 401);
  httplib::Headers h = {{"Authorization", "Bearer sekrit"}};
  EXPECT_EQ(c.Get("/kvad/adapters", h)->status, 200);
}
