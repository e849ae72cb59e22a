// kvad run / chat / synth / tokenize as a user runs them: the built binary, real files.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "core/json.h"
#include "test_support.h"

using namespace kvad;
using test::run_kvad;

namespace {

const std::string& tiny(const std::string& arch) {
  static std::map<std::string, std::string> dirs;
  auto it = dirs.find(arch);
  if (it != dirs.end()) return it->second;
  std::string d = test::temp_dir("tiny-" + arch);
  auto r = run_kvad("synth --arch " + arch + " --preset tiny --std 0.1 --out " + d);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return dirs[arch] = d;
}

}  // namespace

TEST(CliRun, StreamsTextAndStatsForEveryArchitecture) {
  for (std::string arch : {"llama", "qwen2", "qwen3", "gpt2"}) {
    auto r = run_kvad("run --model " + tiny(arch) + " --prompt 'Hello world' -n 8 --temperature 0 --threads 2");
    ASSERT_EQ(r.exit_code, 0) << arch << ": " << r.err;
    EXPECT_FALSE(r.out.empty());
    EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(prompt \d+ tokens \(0 cached\) \| prefill [\d.]+ tok/s \| 8 tokens, decode [\d.]+ tok/s)")))
        << r.err;
  }
}

TEST(CliRun, JsonOutputAndSameSeedSameText) {
  std::string m = tiny("qwen2");
  auto a = run_kvad("run --model " + m + " --prompt 'Once upon' -n 6 --seed 42 --json");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  std::vector<Json> lines;
  std::istringstream in(a.out);
  for (std::string l; std::getline(in, l);) lines.push_back(Json::parse(l));
  ASSERT_EQ(lines.size(), 7u);
  for (size_t i = 0; i < 6; i++) {
    EXPECT_TRUE(lines[i]["id"].is_number_integer());
    EXPECT_TRUE(lines[i]["text"].is_string());
  }
  const Json& s = lines.back();
  for (const char* k : {"prompt_tokens", "cached_tokens", "generated_tokens", "prefill_tok_s", "decode_tok_s"})
    EXPECT_TRUE(s.contains(k)) << k;
  EXPECT_EQ(s["generated_tokens"], 6);
  auto b = run_kvad("run --model " + m + " --prompt 'Once upon' -n 6 --seed 42 --json");
  auto c = run_kvad("run --model " + m + " --prompt 'Once upon' -n 6 --seed 43 --json");
  auto ids = [](const std::string& out) {
    std::vector<int> v;
    std::istringstream in(out);
    for (std::string l; std::getline(in, l);) {
      Json j = Json::parse(l);
      if (j.contains("id")) v.push_back(j["id"]);
    }
    return v;
  };
  EXPECT_EQ(ids(a.out), ids(b.out));
  EXPECT_NE(ids(a.out), ids(c.out));
}

TEST(CliRun, PromptTokensAndChatTemplate) {
  std::string m = tiny("qwen3");
  auto r = run_kvad("run --model " + m + " --prompt-tokens 9707,11,1879 -n 4 --temperature 0 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"prompt_tokens\":3"), std::string::npos) << r.out;
  auto c = run_kvad("run --model " + m + " --prompt hi --chat -n 2 --temperature 0 --json");
  ASSERT_EQ(c.exit_code, 0) << c.err;
  // Qwen3's template around "hi": <|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n -> 9 tokens
  EXPECT_NE(c.out.find("\"prompt_tokens\":9"), std::string::npos) << c.out;
}

TEST(CliChat, MultiTurnWithVisiblePrefixReuse) {
  std::string m = tiny("qwen2");
  auto r = run_kvad("chat --model " + m + " -n 6 --temperature 0", "Hello there\nHow are you today?\n/stats\n/reset\nAgain\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::regex stat(R"(\[prompt (\d+) tokens \((\d+) cached\))");
  std::vector<std::pair<int, int>> turns;
  for (auto it = std::sregex_iterator(r.err.begin(), r.err.end(), stat); it != std::sregex_iterator(); ++it)
    turns.push_back({std::stoi((*it)[1]), std::stoi((*it)[2])});
  ASSERT_EQ(turns.size(), 3u) << r.err;
  EXPECT_EQ(turns[0].second, 0);
  EXPECT_GT(turns[1].second, turns[0].first / 2) << "the second turn must reuse the first turn's prefix";
  EXPECT_GT(turns[1].first, turns[0].first);
  EXPECT_NE(r.err.find("session holds"), std::string::npos);
  EXPECT_NE(r.err.find("conversation cleared"), std::string::npos);
}

TEST(CliChat, UnknownCommandsAreAnsweredNotSentToTheModel) {
  // "/sett temperature 1" is a typo of a command: said so, and no turn is generated for it;
  // "//" sends a line that starts with "/" as text.
  std::string m = tiny("qwen2");
  auto r = run_kvad("chat --model " + m + " -n 3 --temperature 0", "/sett temperature 1\n/help\n//etc\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("unknown command /sett"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("/reset  forget the conversation"), std::string::npos) << r.err;
  std::regex stat(R"(\[prompt (\d+) tokens)");
  EXPECT_EQ(std::distance(std::sregex_iterator(r.err.begin(), r.err.end(), stat), std::sregex_iterator()), 1) << r.err;
}

TEST(CliSynth, PresetMustMatchArchAndShardsWork) {
  auto bad = run_kvad("synth --arch qwen3 --preset gpt2 --out " + test::temp_dir("bad"));
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("use --arch gpt2"), std::string::npos) << bad.err;
  // Without --arch the preset's architecture is taken when only one has it (the real-size presets;
  // too big to write here); "tiny" exists for all four, so it needs --arch.
  auto many = run_kvad("synth --preset tiny --out " + test::temp_dir("ambiguous"));
  EXPECT_EQ(many.exit_code, 1);
  EXPECT_NE(many.err.find("exists for several architectures"), std::string::npos) << many.err;
  // A folder that already holds files is not overwritten without --force.
  std::string once = test::temp_dir("once");
  EXPECT_EQ(run_kvad("synth --arch gpt2 --preset tiny --out " + once).exit_code, 0);
  auto again = run_kvad("synth --arch gpt2 --preset tiny --out " + once);
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_NE(again.err.find("--force"), std::string::npos) << again.err;
  EXPECT_EQ(run_kvad("synth --arch gpt2 --preset tiny --force --out " + once).exit_code, 0);
  std::string d = test::temp_dir("sharded");
  auto r = run_kvad("synth --arch gpt2 --preset tiny --max-shard-size 2MB --out " + d);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("in 2 file(s)"), std::string::npos) << r.out;  // wte alone is 6.4 MB
  EXPECT_TRUE(std::filesystem::exists(d + "/model.safetensors.index.json"));
  auto g = run_kvad("run --model " + d + " --prompt-tokens 1,2 -n 2 --temperature 0");
  EXPECT_EQ(g.exit_code, 0) << g.err;
}

TEST(CliTokenize, IdsAndPieces) {
  auto r = run_kvad("tokenize --model " + tiny("qwen2") + " 'Hello world' --pieces");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[9707,1879]\n[\"Hello\",\"Ġworld\"]\n");
  auto g = run_kvad("tokenize --model " + tiny("gpt2") + " 'Hello world'");
  EXPECT_EQ(g.out, "[15496,995]\n");
}

TEST(CliHelp, EveryCommandHasHelp) {
  for (std::string c : {"run", "chat", "synth", "tokenize"}) {
    auto r = run_kvad(c + " --help");
    EXPECT_EQ(r.exit_code, 0) << c;
    EXPECT_NE(r.out.find("OPTIONS"), std::string::npos) << c << r.out;
  }
  auto none = run_kvad("");
  EXPECT_NE(none.exit_code, 0);
}

TEST(CliRun, AFullContextIsSaidNotJustLength) {
  // -c 12 with a 4-token prompt and -n 50: generation stops at the context (4 + 8 positions, and a 9th
  // token from the last logits), and the stats line says so; stopping at -n says only "length".
  std::string m = tiny("qwen2");
  auto r = run_kvad("run --model " + m + " --prompt-tokens 9707,11,1879,13 -n 50 -c 12 --temperature 0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("| 9 tokens,"), std::string::npos) << r.err;  // 12 positions, then one more sampled from the last
  EXPECT_NE(r.err.find("length (the context of 12 tokens is full)"), std::string::npos) << r.err;
  r = run_kvad("run --model " + m + " --prompt-tokens 9707,11,1879,13 -n 3 -c 12 --temperature 0");
  EXPECT_NE(r.err.find("| length |"), std::string::npos) << r.err;
}
