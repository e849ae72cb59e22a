// Real chat templates (Qwen2.5, Qwen3, Llama 3 / 3.1 / 3.2, SmolLM2, DeepSeek-R1, ...) rendered
// by ChatTemplate must equal what Python's Jinja2 renders in transformers' environment, byte for
// byte. The goldens (tests/fixtures/chat_goldens/<template>.json) come from
// tools/make_chat_goldens.py; the templates are in tests/fixtures/chat_templates/.
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <type_traits>

#include "core/error.h"
#include "test_support.h"
#include "tokenizer/jinja.h"

using namespace kvad;

namespace {

std::string slurp(const std::string& rel) {
  std::ifstream f(test::source_path(rel), std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const char* const kGoldens[] = {
    "qwen2.5-7b-instruct", "qwen3",          "llama-3-instruct",           "llama-3.1-8b-instruct",
    "llama-3.2-1b-instruct", "smollm2-1.7b-instruct", "deepseek-r1",        "zephyr-7b-beta",
    "mistral-7b-instruct-v0.1", "deepseek-coder-33b-instruct", "falcon-rw-1b-chat", "pivot-moe",
    "gpt2-simple",          "chatml-default",           "deepseek-v3",
};

// ChatTemplate takes OrderedJson (insertion order, as Python dicts). Goldens also carry
// `expected_sorted`, what a key-sorted JSON would give; it must NOT be what we produce.
constexpr bool kJsonKeepsInsertionOrder = true;

struct Case {
  std::string name;
  nlohmann::ordered_json messages, extra;
  bool agp = false;
  std::string bos, eos;
};

Case split_case(const nlohmann::ordered_json& c, const std::string& now) {
  Case k;
  k.name = c["name"];
  k.messages = c["messages"];
  k.extra = nlohmann::ordered_json::object();
  for (auto it = c["kwargs"].begin(); it != c["kwargs"].end(); ++it) {
    if (it.key() == "add_generation_prompt") k.agp = it.value().get<bool>();
    else if (it.key() == "bos_token") k.bos = it.value();
    else if (it.key() == "eos_token") k.eos = it.value();
    else k.extra[it.key()] = it.value();
  }
  k.extra["__kvad_now"] = now;
  return k;
}

}  // namespace

class ChatGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(ChatGolden, RendersLikeTransformers) {
  std::string name = GetParam();
  std::string source = slurp("tests/fixtures/chat_templates/" + name + ".jinja");
  ASSERT_FALSE(source.empty());
  auto golden = nlohmann::ordered_json::parse(slurp("tests/fixtures/chat_goldens/" + name + ".json"));
  std::string now = golden["now"];
  ChatTemplate tpl(source, name);
  for (const auto& c : golden["cases"]) {
    Case k = split_case(c, now);
    // Through the public API.
    OrderedJson messages = k.messages;
    OrderedJson extra = k.extra;
    if (c.contains("error")) {
      EXPECT_THROW(tpl.render(messages, k.agp, k.bos, k.eos, extra), Error) << name << "/" << k.name;
      continue;
    }
    std::string want = c["expected"];
    std::string want_api =
        !kJsonKeepsInsertionOrder && c.contains("expected_sorted") ? c["expected_sorted"].get<std::string>() : want;
    try {
      EXPECT_EQ(tpl.render(messages, k.agp, k.bos, k.eos, extra), want_api) << name << "/" << k.name;
    } catch (const Error& e) {
      ADD_FAILURE() << name << "/" << k.name << ": " << e.what();
    }
  }
}

// The engine itself keeps insertion order: with ordered input it matches Python exactly, tools
// and tool-call arguments included.
TEST_P(ChatGolden, EngineMatchesWithInsertionOrder) {
  std::string name = GetParam();
  jinja::Template tpl(slurp("tests/fixtures/chat_templates/" + name + ".jinja"), name);
  auto golden = nlohmann::ordered_json::parse(slurp("tests/fixtures/chat_goldens/" + name + ".json"));
  jinja::RenderOptions opts;
  std::tm tm{};
  tm.tm_year = 2025 - 1900, tm.tm_mon = 2, tm.tm_mday = 14, tm.tm_hour = 9, tm.tm_min = 26, tm.tm_sec = 53;
  tm.tm_wday = 5, tm.tm_yday = 72;
  opts.now = tm;
  for (const auto& c : golden["cases"]) {
    std::vector<std::pair<std::string, jinja::Value>> vars = {
        {"messages", jinja::from_json(c["messages"])},
        {"tools", jinja::Value::none()},
        {"documents", jinja::Value::none()},
    };
    for (auto it = c["kwargs"].begin(); it != c["kwargs"].end(); ++it) {
      bool replaced = false;
      for (auto& kv : vars)
        if (kv.first == it.key()) kv.second = jinja::from_json(it.value()), replaced = true;
      if (!replaced) vars.emplace_back(it.key(), jinja::from_json(it.value()));
    }
    if (c.contains("error")) {
      EXPECT_THROW(tpl.render(vars, opts), Error) << name << "/" << c["name"];
      continue;
    }
    try {
      EXPECT_EQ(tpl.render(vars, opts), c["expected"].get<std::string>()) << name << "/" << c["name"];
    } catch (const Error& e) {
      ADD_FAILURE() << name << "/" << c["name"] << ": " << e.what();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Templates, ChatGolden, ::testing::ValuesIn(kGoldens),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

TEST(ChatTemplate, FixtureTemplatesAreTheTokenizerConfigOnes) {
  for (const char* fam : {"qwen3", "llama3"}) {
    Json cfg = Json::parse(slurp(std::string("tests/fixtures/tokenizers/") + fam + "/tokenizer_config.json"));
    std::string file = std::string(fam) == "qwen3" ? "qwen3" : "llama-3-instruct";
    EXPECT_EQ(cfg["chat_template"].get<std::string>(), slurp("tests/fixtures/chat_templates/" + file + ".jinja")) << fam;
  }
  // DeepSeek-V3's is kept gzipped with its tokenizer.
  Json ds = Json::parse(test::read_gzip_file(test::source_path("tests/fixtures/tokenizers/deepseek_v3/tokenizer_config.json.gz")));
  EXPECT_EQ(ds["chat_template"].get<std::string>(), slurp("tests/fixtures/chat_templates/deepseek-v3.jinja"));
}

TEST(ChatTemplate, SyntaxErrorNamesTemplateAndLine) {
  try {
    ChatTemplate t("{% for m in messages %}\n{{ m.content }\n{% endfor %}", "my-model/tokenizer_config.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("my-model/tokenizer_config.json:2:", 0), 0u) << e.what();
  }
}

TEST(ChatTemplate, RaiseExceptionBecomesError) {
  ChatTemplate t("{% if messages|length == 0 %}\n{{ raise_exception('No messages!') }}{% endif %}", "tpl");
  try {
    t.render(OrderedJson::array(), false, "", "");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "tpl:2: raise_exception: No messages!");
  }
}

TEST(ChatTemplate, VariablesAndDefaults) {
  ChatTemplate t("{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ tools is none }}|"
                 "{{ documents is none }}|{{ enable_thinking }}|{{ strftime_now('%Y-%m-%d') }}|{{ messages|length }}",
                 "tpl");
  OrderedJson extra = {{"enable_thinking", false}, {"__kvad_now", "2024-07-26"}};
  EXPECT_EQ(t.render(OrderedJson::array({{{"role", "user"}, {"content", "hi"}}}), true, "<s>", "</s>", extra),
            "<s>|</s>|True|True|True|False|2024-07-26|1");
  OrderedJson tools = {{"tools", OrderedJson::array({{{"name", "f"}}})}};
  ChatTemplate t2("{{ tools|length }}", "tpl2");
  EXPECT_EQ(t2.render(OrderedJson::array(), false, "", "", tools), "1");
  EXPECT_THROW(t.render(OrderedJson::array(), false, "", "", OrderedJson{{"__kvad_now", "yesterday"}}), Error);
}

TEST(ChatTemplate, StrftimeNowWithoutFixedDateIsToday) {
  ChatTemplate t("{{ strftime_now('%Y') }}", "tpl");
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  EXPECT_EQ(t.render(OrderedJson::array(), false, "", ""), std::to_string(1900 + tm.tm_year));
}
