// LoRA adapters in the server (serve/lora_adapters.h): --lora at start, GET / POST /lora-adapters
// as llama-server has them, the per-request `lora` field with its limits, and requests with
// different adapters running at once answering exactly what each gets alone.
#include <gtest/gtest.h>
#include <httplib.h>

#include <cmath>
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
