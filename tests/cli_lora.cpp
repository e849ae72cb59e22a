// --lora on the command line: an adapter changes what `kvad run` says and the scale is read from
// PATH:SCALE; an adapter that does not load is exit 1 naming the file or tensor; `kvad bench
// --lora` measures the base and the adapted model and prints their ratio.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "core/json.h"
#include "test_support.h"

using namespace kvad;
using test::run_kvad;

namespace {

// The base of the qwen2 golden adapter (tests/golden/lora), through the CLI's synth.
std::string base() {
  static std::string dir = [] {
    Json s = read_json_file(test::source_path("tests/golden/lora/lora.json"))["synth"];
    std::string out = test::temp_dir("cli-lora-model");
    auto r = run_kvad(fmt::format("synth --arch qwen2 --preset {} --seed {} --std {} --norm-jitter {} --out {} --force",
                                  s["preset"].get<std::string>(), s["seed"].get<int>(), s["std"].get<double>(),
                                  s["norm_jitter"].get<double>(), out));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return out;
  }();
  return dir;
}

std::string run_ids(const std::string& lora) {
  auto r = run_kvad("run --model " + base() + " --prompt-tokens 17,301,5,77 -n 6 --temperature 0 --json" + lora);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::string ids;
  for (size_t at = r.out.find("\"id\":"); at != std::string::npos; at = r.out.find("\"id\":", at + 1))
    ids += r.out.substr(at + 5, r.out.find_first_of(",}", at) - at - 5) + " ";
  return ids;
}

}  // namespace

TEST(CliLora, AnAdapterChangesTheAnswerAndScaleZeroDoesNot) {
  const std::string adapter = test::source_path("tests/golden/lora/qwen2");
  std::string plain = run_ids(""), adapted = run_ids(" --lora " + adapter), off = run_ids(" --lora " + adapter + ":0");
  EXPECT_FALSE(plain.empty());
  EXPECT_NE(plain, adapted);
  EXPECT_EQ(plain, off);
}

// One path per --lora: the words after it are still the prompt, and two adapters stack.
TEST(CliLora, APromptAfterTheFlagStaysThePrompt) {
  const std::string adapter = test::source_path("tests/golden/lora/qwen2");
  auto r = run_kvad("run " + base() + " --lora " + adapter + " --lora " + adapter + ":0.5 hello there -n 2");
  auto plain = run_kvad("run " + base() + " hello there -n 2");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto prompt_line = [](const std::string& err) { return err.substr(err.find("prompt "), 16); };
  EXPECT_EQ(prompt_line(r.err), prompt_line(plain.err));  // "prompt 5 tokens": both words, in both runs
}

TEST(CliLora, AdaptersThatDoNotLoadAreNamed) {
  auto r = run_kvad("run --model " + base() + " --prompt hi -n 1 --lora /nonexistent/adapter");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("/nonexistent/adapter: no such LoRA adapter"), std::string::npos) << r.err;
  r = run_kvad("run --model " + base() + " --prompt hi -n 1 --lora " + test::source_path("tests/golden/lora/qwen3"));
  EXPECT_EQ(r.exit_code, 1);
    // qwen3's head_dim makes its q_proj 128 wide, the qwen2 base's 64
  EXPECT_NE(r.err.find("self_attn.q_proj.lora_B.weight' is [128, 4]"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("another base"), std::string::npos) << r.err;
}

TEST(CliLora, BenchMeasuresBaseAndAdaptedInTurn) {
  auto r = run_kvad("bench --model " + base() + " --lora " + test::source_path("tests/golden/lora/qwen2") +
                    " -p 8 -g 4 -r 1 --warmup 0 --no-bandwidth");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("pp8 tg4 +lora"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("lora/base"), std::string::npos) << r.out;
}
