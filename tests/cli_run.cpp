// kvad run / chat / synth / tokenize as a user runs them: the built binary, real files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "core/cpu.h"
#include "core/fs.h"
#include "core/json.h"
#include "core/utf8.h"
#include "fixture_tokenizer.h"
#include "models/registry.h"
#include "gpu_device.h"
#include "test_support.h"

using namespace kvad;
using test::run_kvad;

namespace {

// A synthesized model of `arch`, made once per process: "tiny" with the family's real tokenizer,
// "tiny-v512" with the same layers over GPT-2's BPE cut to 512 tokens (for tests about the layers
// on a device, where lavapipe spent most of its time on a 150k-row head).
const std::string& tiny(const std::string& arch, const std::string& preset = "tiny") {
  static std::map<std::string, std::string> dirs;
  const std::string name = preset + "-" + arch;
  auto it = dirs.find(name);
  if (it != dirs.end()) return it->second;
  std::string d = test::temp_dir(name);
  auto r = run_kvad("synth --arch " + arch + " --preset " + preset + " --std 0.1 --out " + d);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return dirs[name] = d;
}

// The HF reference's ids of one golden text for one fixture tokenizer (tools/make_tokenizer_goldens.py).
Json golden_ids(const std::string& case_name, const std::string& tokenizer) {
  static const Json goldens = read_json_file(test::source_path("tests/fixtures/tokenizer_goldens/goldens.json"));
  for (const Json& c : goldens["cases"])
    if (c["name"] == case_name) return c["ids"][tokenizer];
  return Json();
}

// `kvad run` of the model in `dir` on "Hello world": it encodes to `prompt_tokens`, generates, decodes.
void expect_generates_from_hello_world(const std::string& dir, size_t prompt_tokens) {
  auto g = run_kvad("run --model " + dir + " --prompt 'Hello world' -n 6 --temperature 0 --threads 2");
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_NE(g.err.find("prompt " + std::to_string(prompt_tokens) + " tokens"), std::string::npos) << g.err;
  EXPECT_TRUE(kvad::is_valid_utf8(g.out)) << g.out;
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

// KVAD_ISA=avx512-nobf16 runs what an AVX-512 CPU without BF16 (Ice Lake, Cascade Lake) runs: the
// AVX-512 kernels, not AVX2's. Language models' products do without BF16's instructions (the
// integer ones, and bf16 weights widened), so they write what the full set writes; the summary
// says the BF16 products are unused, and training in bf16 is refused by name.
TEST(CliRun, Avx512WithoutBf16WritesWhatAvx512Writes) {
  if (best_isa() < Isa::Avx512 || !cpu_features().avx512bf16)
    GTEST_SKIP() << "SKIPPED: needs AVX-512 with BF16 to compare with (" << cpu_summary() << ")";
  const std::string m = tiny("qwen2"), no_bf16 = "env KVAD_ISA=avx512-nobf16";
  const std::string prompt = "In the beginning God created the heaven and the earth, and the earth was without form";
  for (const char* quant : {"q8", "q4", "bf16"}) {
    const std::string args = "run --model " + m + " -q " + quant + " --prompt '" + prompt + "' -n 12 --temperature 0 --threads 2";
    auto all = run_kvad(args), without = test::run_kvad_under(no_bf16, args);
    ASSERT_EQ(all.exit_code, 0) << all.err;
    ASSERT_EQ(without.exit_code, 0) << without.err;
    EXPECT_EQ(without.out, all.out) << quant;
  }
  auto devices = test::run_kvad_under(no_bf16, "devices");
  EXPECT_NE(devices.out.find("kernels avx512 (avx512-vnni bf16 unused)"), std::string::npos) << devices.out << devices.err;
  auto train = test::run_kvad_under(no_bf16, "train --data '" + test::source_path("README.md") +
                                                 "' --name never --steps 1 --precision bf16");
  EXPECT_NE(train.exit_code, 0);
  EXPECT_NE(train.err.find("--precision bf16 needs a CPU with AVX512-BF16"), std::string::npos) << train.err;
}

// KVAD_ISA=avx512-novnni runs what an AVX-512 CPU without VNNI (Skylake-SP/X) runs: the AVX-512
// kernels, with q8/q4 products summed by vpmaddubsw (the VNNI kernel's bits, so the same text)
// and K-quants on AVX2's kernels; no BF16, no AMX.
TEST(CliRun, Avx512WithoutVnniWritesWhatAvx512Writes) {
  if (best_isa() < Isa::Avx512 || !cpu_features().avx512vnni)
    GTEST_SKIP() << "SKIPPED: needs AVX-512 with VNNI to compare with (" << cpu_summary() << ")";
  const std::string m = tiny("qwen2"), no_vnni = "env KVAD_ISA=avx512-novnni";
  const std::string prompt = "In the beginning God created the heaven and the earth, and the earth was without form";
  for (const char* quant : {"q8", "q4"}) {
    const std::string args = "run --model " + m + " -q " + quant + " --prompt '" + prompt + "' -n 12 --temperature 0 --threads 2";
    auto all = test::run_kvad_under("env KVAD_ISA=avx512-nobf16", args), without = test::run_kvad_under(no_vnni, args);
    ASSERT_EQ(all.exit_code, 0) << all.err;
    ASSERT_EQ(without.exit_code, 0) << without.err;
    EXPECT_EQ(without.out, all.out) << quant;
  }
  auto devices = test::run_kvad_under(no_vnni, "devices");
  EXPECT_NE(devices.out.find("kernels avx512 (avx512-vnni unused"), std::string::npos) << devices.out << devices.err;
  EXPECT_EQ(devices.out.find(" bf16)"), std::string::npos) << devices.out;
}

// KVAD_ISA=avx2-vnni runs what an Alder Lake (AVX2 with AVX-VNNI, no AVX-512) runs; plain avx2 is
// a Haswell's or a Zen 3's. The summary names the VNNI tiles only where they are taken, and a
// value kvad does not know is said to be ignored.
TEST(CliRun, AvxVnniIsTakenOnlyWhereAsked) {
  if (!cpu_features().avx_vnni) GTEST_SKIP() << "SKIPPED: no AVX-VNNI on this CPU (" << cpu_summary() << ")";
  const std::string m = tiny("qwen2");
  auto vnni = test::run_kvad_under("env KVAD_ISA=avx2-vnni", "devices"), plain = test::run_kvad_under("env KVAD_ISA=avx2", "devices");
  EXPECT_NE(vnni.out.find("kernels avx2 ("), std::string::npos) << vnni.out << vnni.err;
  EXPECT_NE(vnni.out.find("avx-vnni)"), std::string::npos) << vnni.out;
  EXPECT_EQ(plain.out.find("avx-vnni"), std::string::npos) << plain.out;
  auto typo = test::run_kvad_under("env KVAD_ISA=avx-512", "devices");
  EXPECT_EQ(typo.exit_code, 0) << typo.err;
  EXPECT_NE(typo.err.find("warning: KVAD_ISA=avx-512 is not one of scalar, avx2, avx2-vnni, avx512-novnni, avx512-nobf16, avx512, amx; ignored"), std::string::npos) << typo.err;
  auto r = test::run_kvad_under("env KVAD_ISA=avx2-vnni", "run --model " + m + " -q q8 --prompt 'In the beginning God created "
                                                           "the heaven and the earth' -n 8 --temperature 0 --threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("8 tokens"), std::string::npos) << r.err;
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

TEST(CliRun, ModelAndPromptPositionallyFromStdinOrAFile) {
  // Ollama's habit: kvad run MODEL PROMPT. The same greedy text from every way of giving the prompt.
  std::string m = tiny("qwen2"), dir = test::temp_dir("run-prompt");
  const std::string opts = " -n 5 --temperature 0 --json";
  auto flag = run_kvad("run -m " + m + " -p 'Once upon a time'" + opts);
  ASSERT_EQ(flag.exit_code, 0) << flag.err;
  auto words = run_kvad("run " + m + " Once upon a time" + opts);
  auto piped = run_kvad("run " + m + opts, "Once upon a time\n");
  auto after_stop = run_kvad("run " + m + " --stop zzzz Once upon a time" + opts);  // --stop takes one value
  std::ofstream(dir + "/p.txt") << "Once upon a time\n";
  auto file = run_kvad("run " + m + " -f " + dir + "/p.txt" + opts);
  auto tokens = [](const std::string& out) { return out.substr(0, out.rfind("{\"cached_tokens\"")); };  // not the timings
  ASSERT_NE(tokens(flag.out), "");
  for (auto* r : {&words, &piped, &file, &after_stop}) {
    ASSERT_EQ(r->exit_code, 0) << r->err;
    EXPECT_EQ(tokens(r->out), tokens(flag.out));
  }
  // Two ways at once, no prompt at all, a missing file: each said, exit 1.
  auto both = run_kvad("run " + m + " hello -p hi" + opts);
  EXPECT_EQ(both.exit_code, 1);
  EXPECT_NE(both.err.find("one way"), std::string::npos) << both.err;
  auto none = run_kvad("run " + m + opts);
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.err.find("no prompt"), std::string::npos) << none.err;
  auto missing = run_kvad("run " + m + " -f " + dir + "/nope.txt" + opts);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("nope.txt"), std::string::npos) << missing.err;
  // A first word that is a path is a model, even a missing one (not a prompt for the default).
  auto path = run_kvad("run ./no-such-model hello" + opts);
  EXPECT_EQ(path.exit_code, 1);
  EXPECT_NE(path.err.find("./no-such-model: no such model folder"), std::string::npos) << path.err;
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
  EXPECT_NE(r.err.find("/reset               forget the conversation"), std::string::npos) << r.err;
  std::regex stat(R"(\[prompt (\d+) tokens)");
  EXPECT_EQ(std::distance(std::sregex_iterator(r.err.begin(), r.err.end(), stat), std::sregex_iterator()), 1) << r.err;
}

TEST(CliChat, AFullContextDropsTheOldestTurnsAndKeepsTheSystemMessage) {
  // A 64-token context and 8-token answers: after a few turns the conversation no longer fits.
  // The oldest turns go (said so), the system message stays (in the /save file), and the turn
  // after the drop reuses the shortened conversation's prefix.
  std::string m = tiny("qwen3"), saved = test::temp_dir("chat-save") + "/conv.json";
  std::string in;
  for (int i = 0; i < 8; i++) in += "message number " + std::to_string(i) + " here\n";
  auto r = run_kvad("chat " + m + " -c 64 -n 8 --temperature 0 --system 'be brief'", in + "/save " + saved + "\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  size_t drop = r.err.find("dropped the ");
  ASSERT_NE(drop, std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the system message is kept"), std::string::npos) << r.err;
  std::regex stat(R"(\[prompt (\d+) tokens \((\d+) cached\))");
  std::vector<std::pair<int, int>> after;
  std::string tail = r.err.substr(drop);
  for (auto it = std::sregex_iterator(tail.begin(), tail.end(), stat); it != std::sregex_iterator(); ++it)
    after.push_back({std::stoi((*it)[1]), std::stoi((*it)[2])});
  ASSERT_GE(after.size(), 2u) << r.err;
  EXPECT_GT(after[1].second, after[0].first / 2) << "the turn after a drop reuses the prefix: " << r.err;
  for (auto [prompt, cached] : after) EXPECT_LE(prompt + 8, 64) << r.err;
  Json doc = Json::parse(kvad::read_file(saved));
  EXPECT_EQ(doc["messages"][0]["role"], "system");
  EXPECT_EQ(doc["messages"][0]["content"], "be brief");
  EXPECT_EQ(doc["messages"].back()["role"], "assistant");
  EXPECT_LT(doc["messages"].size(), 17u);  // 1 + 8 x 2 had nothing been dropped
}

TEST(CliChat, SetSaveAndLoadOverAPipe) {
  std::string m = tiny("qwen2"), dir = test::temp_dir("chat-set");
  auto r = run_kvad("chat --model " + m + " -n 3 --temperature 0",
                    "/set top_p 2\n/set top_k 1.5\n/set nosuch 1\n/set temperature 0.25\n/set\nhello\n/save " + dir +
                        "/c.json\n/reset\n/load " + dir + "/c.json\n/load " + dir + "/missing-model\n/stats\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("error: top_p"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("'1.5' is not a whole number"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("unknown setting 'nosuch'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("temperature 0.25  top_k 40  top_p 0.95"), std::string::npos) << "bad values are not kept: " << r.err;
  EXPECT_NE(r.err.find("loaded 2 messages"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("missing-model: no such model folder"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("conversation 2 messages"), std::string::npos) << r.err;
}

TEST(CliShow, DescribesAModelWithoutLoadingIt) {
  // The figures are the synthesized model's own (kvad synth's preset: tiny qwen3 = 2 layers, 64
  // hidden, 4 heads, 2 kv heads) and the files on disk; the template is the tokenizer_config's.
  std::string m = tiny("qwen3");
  auto r = run_kvad("show " + m + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json j = Json::parse(r.out);
  Json config = Json::parse(kvad::read_file(m + "/config.json"));
  EXPECT_EQ(j["architecture"], "Qwen3ForCausalLM (qwen3)");
  EXPECT_EQ(j["layers"], config["num_hidden_layers"]);
  EXPECT_EQ(j["kv_heads"], config["num_key_value_heads"]);
  EXPECT_EQ(j["context"], config["max_position_embeddings"]);
  EXPECT_EQ(j["runs"], true);
  EXPECT_EQ(j["source"], "a folder");
  EXPECT_EQ(j["chat_template"], Json::parse(kvad::read_file(m + "/tokenizer_config.json"))["chat_template"]);
  uint64_t total = 0;
  for (const auto& e : std::filesystem::directory_iterator(m)) total += e.file_size();
  EXPECT_EQ(j["bytes_on_disk"], total);
  // The parameter count is what loading reports (kvad chat's greeting counts the loaded weights).
  auto greet = run_kvad("chat " + m + " -n 1", "");
  std::smatch p;
  ASSERT_TRUE(std::regex_search(greet.err, p, std::regex(R"(, (\d+)M parameters)"))) << greet.err;
  EXPECT_EQ(std::stoi(p[1]), (int)std::lround(j["parameters"].get<double>() / 1e6));
  // The human form, the template alone, the default model, a model that is not there.
  auto human = run_kvad("show " + m);
  EXPECT_NE(human.out.find("2 kv_heads"), std::string::npos) << human.out;
  auto tmpl = run_kvad("show " + m + " --template");
  EXPECT_EQ(tmpl.out, j["chat_template"].get<std::string>() + "\n");
  auto dflt = run_kvad("show");
  EXPECT_EQ(dflt.exit_code, 0) << dflt.err;
  EXPECT_NE(dflt.out.find("(the default model)"), std::string::npos) << dflt.out;
  EXPECT_NE(dflt.out.find("shipped with kvad"), std::string::npos) << dflt.out;
  auto missing = run_kvad("show ./nope");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("./nope: no such model folder"), std::string::npos) << missing.err;
}

TEST(CliBench, ATableThatFitsATerminalAClampSaidAProfileAndAPeakWithoutTheProbe) {
  std::string m = tiny("qwen2");
  int64_t ctx = Json::parse(kvad::read_file(m + "/config.json"))["max_position_embeddings"];
  std::string too_long = std::to_string(ctx + 100);
  auto r = run_kvad("bench -m " + m + " -p 16," + too_long + " -g 4 -r 1 --warmup 0 -t 1 --profile");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // --profile: the backend's tables on stderr, decode apart, the head among the matrix products.
  const int64_t vocab = Json::parse(kvad::read_file(m + "/config.json"))["vocab_size"];
  EXPECT_NE(r.err.find("decode (one-row) forwards"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("%  " + std::to_string(vocab) + "x"), std::string::npos) << r.err;
  // --kv-type auto (the default) is bf16 on the CPU (docs/kv-cache.md).
  EXPECT_NE(r.out.find(" of KV cache (bf16)"), std::string::npos) << r.out;
  std::string fit = std::to_string(ctx - 4);
  EXPECT_NE(r.err.find("pp" + too_long + " + tg4 does not fit the context of " + std::to_string(ctx) + ": measuring pp" + fit),
            std::string::npos) << r.err;
  std::istringstream lines(r.out);
  std::string l_model;
  int rows = 0;
  std::getline(lines, l_model);  // the model's name (a path) on its own line
  for (std::string l; std::getline(lines, l);) {
    EXPECT_LE(l.size(), 100u) << "a line wider than a terminal: " << l;
    if (l.rfind("pp", 0) == 0) rows++;
  }
  EXPECT_EQ(rows, 2) << r.out;
  EXPECT_NE(r.out.find("pp" + fit + " tg4"), std::string::npos) << r.out;
  // The peak RSS: the model and the benchmark, not the bandwidth probe's 1 GiB buffer.
  auto j = run_kvad("bench -m " + m + " -p 16,48 -g 4 -r 1 --warmup 0 -t 1 --json");
  ASSERT_EQ(j.exit_code, 0) << j.err;
  Json row = Json::parse(j.out.substr(0, j.out.find('\n')));
  EXPECT_GT(row["read_bandwidth_gbs"].get<double>(), 0);
  // The probe's slowest pass beside its best: how far a neighbour moved the bound meanwhile.
  EXPECT_GT(row["read_bandwidth_lowest_gbs"].get<double>(), 0) << j.out;
  EXPECT_LE(row["read_bandwidth_lowest_gbs"].get<double>(), row["read_bandwidth_gbs"].get<double>()) << j.out;
  EXPECT_LT(row["peak_rss_bytes"].get<double>(), 1024.0 * 1024 * 1024) << j.out;
  EXPECT_GT(row["peak_rss_bytes"].get<double>(), row["model_bytes"].get<double>()) << j.out;
  // The share of bandwidth counts the cache a decode step reads: 32 more prompt tokens, 32 more
  // positions read at every step.
  Json longer = Json::parse(j.out.substr(j.out.find('\n') + 1));
  EXPECT_EQ(longer["decode_kv_read_bytes"].get<int64_t>() - row["decode_kv_read_bytes"].get<int64_t>(),
            32 * row["kv_bytes_per_token"].get<int64_t>()) << j.out;
  EXPECT_GT(row["decode_kv_read_bytes"].get<int64_t>(), 16 * row["kv_bytes_per_token"].get<int64_t>()) << j.out;
}

TEST(CliBench, BatchedRowsSayTheShareOfBandwidthAStepReads) {
  // --batch: a step reads the weights once and each sequence's cache; its share of the probe is
  // what that read per step's time is (the column that showed batched bf16 at half one token's).
  std::string m = tiny("qwen2");
  auto j = run_kvad("bench -m " + m + " --batch 1,3 -p 8 -g 4 -t 1 --json");
  ASSERT_EQ(j.exit_code, 0) << j.err;
  std::istringstream lines(j.out);
  std::vector<Json> rows;
  for (std::string l; std::getline(lines, l);)
    if (!l.empty()) rows.push_back(Json::parse(l));
  ASSERT_EQ(rows.size(), 2u) << j.out;
  const Json &one = rows[0], &three = rows[1];
  EXPECT_EQ(three["batch"], 3);
  EXPECT_GT(one["decode_kv_read_bytes"].get<int64_t>(), 0) << j.out;
  EXPECT_NEAR(three["decode_step_read_bytes"].get<double>() - one["decode_step_read_bytes"].get<double>(),
              2 * one["decode_kv_read_bytes"].get<double>(), 2) << j.out;
  for (const Json& row : rows) {
    const double gbs = row["decode_step_read_bytes"].get<double>() / (row["decode_step_ms"].get<double>() / 1e3) / 1e9;
    ASSERT_GT(row["read_bandwidth_gbs"].get<double>(), 0) << j.out;
    EXPECT_NEAR(row["decode_bandwidth_pct"].get<double>(), 100 * gbs / row["read_bandwidth_gbs"].get<double>(), 1e-6 * 100) << j.out;
  }
  auto text = run_kvad("bench -m " + m + " --batch 2 -p 8 -g 4 -t 1 --no-bandwidth");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("step ms   of bw"), std::string::npos) << text.out;
  auto quiet = run_kvad("bench -m " + m + " --batch 2 -p 8 -g 4 -t 1 --no-bandwidth --json");
  ASSERT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_FALSE(Json::parse(quiet.out.substr(0, quiet.out.find('\n'))).contains("decode_bandwidth_pct")) << quiet.out;
}

TEST(CliInstall, AnInstalledBinaryFindsTheDefaultModelBesideIt) {
  // cmake --install puts the binary in PREFIX/bin and the shipped model in PREFIX/share/kvad; the
  // installed kvad uses that copy (not the source tree it was built from) and runs it.
  std::string prefix = test::temp_dir("install");
  std::string build = std::filesystem::path(KVAD_BINARY).parent_path().string();
  ASSERT_EQ(std::system(("cmake --install '" + build + "' --prefix '" + prefix + "' >/dev/null").c_str()), 0);
  std::string kvad = prefix + "/bin/kvad";
  ASSERT_TRUE(std::filesystem::exists(kvad));
  std::string out = prefix + "/show.json";
  ASSERT_EQ(std::system(("'" + kvad + "' show --json > '" + out + "'").c_str()), 0);
  Json j = Json::parse(kvad::read_file(out));
  EXPECT_EQ(j["path"], prefix + "/share/kvad/models/kvad-kjv");
  EXPECT_EQ(j["source"], "shipped with kvad");
  std::string text = prefix + "/run.txt";
  ASSERT_EQ(std::system(("'" + kvad + "' run 'And God said' -n 8 --temperature 0 </dev/null > '" + text + "' 2>/dev/null").c_str()), 0);
  EXPECT_GE(kvad::read_file(text).size(), 8u);
}

TEST(CliTui, WithoutATerminalSaysSoInsteadOfDrawing) {
  auto r = run_kvad("tui " + tiny("qwen3"));  // stdin and stdout are files here
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("needs a terminal (use kvad chat for pipes)"), std::string::npos) << r.err;
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

// A Llama 2-style model folder: the SentencePiece tokenizer fixture (BPE with byte_fallback, "▁"
// for spaces) gives the HF reference ids through the CLI, and in place of a tiny llama's own
// tokenizer (its 128256 embedding rows hold the 32000 ids) it loads, encodes, generates, decodes.
TEST(CliTokenize, SentencePieceTokenizerFolder) {
  Json want = golden_ids("add_special", "llama2");  // "Hello world" with BOS
  ASSERT_TRUE(want.is_array());
  std::string sp = test::source_path("tests/fixtures/tokenizers/llama2");
  auto r = run_kvad("tokenize --model " + sp + " --special 'Hello world' --pieces");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, want.dump() + "\n[\"<s>\",\"\u2581Hello\",\"\u2581world\"]\n");

  std::string d = test::temp_dir("tiny-llama-sp");
  ASSERT_EQ(run_kvad("synth --arch llama --preset tiny --std 0.1 --out " + d).exit_code, 0);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(sp + "/" + f, d + "/" + f, std::filesystem::copy_options::overwrite_existing);
  expect_generates_from_hello_world(d, want.size());
}

// A DeepSeek-V3 model with DeepSeek's own tokenizer, through the binary: synth writes the copy
// compiled in (embedded from the gzipped fixture as it is), `kvad tokenize` on it gives the HF
// reference's ids (with the BOS transformers adds), and the model loads, renders its chat
// template, encodes, generates and decodes.
TEST(CliSynth, DeepSeekV3PresetRunsWithItsOwnTokenizer) {
  Json want = golden_ids("add_special", "deepseek_v3");  // "Hello world" with BOS
  ASSERT_TRUE(want.is_array());
  ASSERT_EQ(want[0], 0);  // <｜begin▁of▁sentence｜>

  std::string d = test::temp_dir("tiny-deepseek-v3-tok");
  auto s = run_kvad("synth --preset tiny-deepseek-v3-tok --std 0.1 --out " + d);
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_NE(s.out.find("deepseek_v3 tiny-deepseek-v3-tok"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("tokenizer deepseek_v3"), std::string::npos) << s.out;
  std::string fx = test::source_path("tests/fixtures/tokenizers/deepseek_v3/");
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    EXPECT_TRUE(read_file(d + "/" + f) == test::read_gzip_file(fx + f + ".gz")) << f << " is not the fixture's";

  auto t = run_kvad("tokenize --model " + d + " --special 'Hello world'");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_EQ(t.out, want.dump() + "\n");

  expect_generates_from_hello_world(d, want.size());

  // The chat template: BOS, <｜User｜>, "Hi", <｜Assistant｜> (added tokens, one id each).
  auto c = run_kvad("run --model " + d + " --chat --prompt 'Hi' -n 2 --temperature 0 --threads 2");
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.err.find("prompt 4 tokens"), std::string::npos) << c.err;
}

// Every synth preset that names a bundled tokenizer fits it: the tokenizer's ids are rows of the
// embedding, and the config's BOS/EOS are ids of that tokenizer (DeepSeek-V3's: its own 0 and 1).
TEST(CliSynth, PresetsFitTheirTokenizers) {
  std::map<std::string, std::unique_ptr<Tokenizer>> toks;
  int checked = 0;
  for (const Architecture& a : architectures())
    for (const SynthPreset& p : a.presets) {
      if (p.tokenizer.empty() || p.tokenizer.rfind("gpt2-trim", 0) == 0) continue;
      SCOPED_TRACE(a.model_type + " " + p.name + " " + p.tokenizer);
      auto& tok = toks[p.tokenizer];
      if (!tok) tok = std::make_unique<Tokenizer>(test::load_fixture_tokenizer(p.tokenizer));
      int64_t vocab = p.config["vocab_size"].get<int64_t>();
      EXPECT_LE(tok->vocab_size(), vocab);
      for (const char* k : {"bos_token_id", "eos_token_id"}) {
        if (p.config.contains(k) && p.config[k].is_number_integer()) {
          EXPECT_LT(p.config[k].get<int64_t>(), tok->vocab_size()) << k;
        }
      }
      if (p.tokenizer == "deepseek_v3") {
        EXPECT_EQ(vocab, 129280);
        EXPECT_EQ(p.config["bos_token_id"], *tok->bos_id());
        EXPECT_EQ(p.config["eos_token_id"], *tok->eos_id());
      }
      checked++;
    }
  EXPECT_GE(checked, 10);
  ASSERT_TRUE(toks.count("deepseek_v3"));
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

// --spec ngram and --draft on the command line: the same greedy text, the drafts in the stats
// and the JSON summary; a draft that cannot serve is refused before anything runs.
TEST(CliRun, SpeculationGivesTheSameTextAndReportsItsDrafts) {
  const std::string m = tiny("qwen2"), opts = " --prompt-tokens 9707,11,1879,9707,11,1879,9707 -n 24 --temperature 0 --json";
  auto plain = run_kvad("run --model " + m + opts);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  for (const std::string& spec : {std::string(" --spec ngram"), " --draft " + m + " --draft-quant q8 --draft-p-min 0"}) {
    SCOPED_TRACE(spec);
    auto r = run_kvad("run --model " + m + opts + spec);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    // One JSON line per token, then the summary: the token lines are the plain run's.
    EXPECT_EQ(r.out.substr(0, r.out.rfind("\n{")), plain.out.substr(0, plain.out.rfind("\n{")));
    Json summary = Json::parse(r.out.substr(r.out.rfind("\n{") + 1));
    EXPECT_GT(summary["draft_tokens"].get<int64_t>(), 0);
    EXPECT_NE(r.err.find("drafts kept"), std::string::npos) << r.err;
  }
  auto both = run_kvad("run --model " + m + opts + " --spec ngram --draft " + m);
  EXPECT_NE(both.exit_code, 0);
  EXPECT_NE(both.err.find("give one"), std::string::npos) << both.err;
  auto other = run_kvad("run --model " + m + opts + " --draft " + tiny("gpt2"));
  EXPECT_NE(other.exit_code, 0);
  EXPECT_NE(other.err.find("same tokenizer"), std::string::npos) << other.err;
}

// A machine without a usable Vulkan loader (none, or a broken one first on the library path) runs
// on the CPU as before: `kvad devices` says why there is no GPU, and asking for one is an error
// that names the reason and what to install, never a crash.
TEST(CliRun, WithoutAVulkanLoaderTheCpuStillRuns) {
  const std::string dir = test::temp_dir("no-vulkan");
  std::ofstream(dir + "/libvulkan.so.1").close();  // empty: dlopen fails as if there were none
  const std::string launcher = "env LD_LIBRARY_PATH=" + dir;
  const std::string base = "run --model " + tiny("llama") + " --prompt 'Hello world' -n 4 --temperature 0 --threads 2";
  auto list = test::run_kvad_under(launcher, "devices");
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_NE(list.out.find("cpu "), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("gpu     none: no Vulkan loader (libvulkan.so.1)"), std::string::npos) << list.out;
  auto cpu = test::run_kvad_under(launcher, base);
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  EXPECT_EQ(cpu.out, run_kvad(base).out);
  auto gpu = test::run_kvad_under(launcher, base + " --device gpu");
  EXPECT_EQ(gpu.exit_code, 1) << gpu.err;
  EXPECT_NE(gpu.err.find("--device gpu: no Vulkan loader (libvulkan.so.1) on this machine: install libvulkan1"),
            std::string::npos) << gpu.err;
}

// --device as users type it: the same greedy text from the GPU backend (lavapipe, named) as from
// the CPU, for each architecture it runs; a refused family and a bad device name are errors that
// say what to do, with a non-zero exit.
TEST(CliRun, DeviceGpuWritesWhatTheCpuWrites) {
  KVAD_NEED_GPU(device);
  // The default cache (auto: bf16 on both devices), and f32 and q8 on both.
  for (std::string arch : {"llama", "gpt2"})
    for (std::string kv : {"", " --kv-type f32", " --kv-type q8"}) {
      if (arch == "gpt2" && !kv.empty()) continue;
      const std::string base =
          "run --model " + tiny(arch, "tiny-v512") + " --prompt 'Hello world' -n 8 --temperature 0 --threads 2" + kv;
      auto cpu = run_kvad(base);
      auto gpu = run_kvad(base + " --device " + device);
      ASSERT_EQ(gpu.exit_code, 0) << arch << kv << ": " << gpu.err;
      EXPECT_EQ(gpu.out, cpu.out) << arch << kv;
    }
  auto moe = run_kvad("run --model " + tiny("qwen3_moe") + " -p hi -n 2 --device " + device);
  EXPECT_NE(moe.exit_code, 0);
  EXPECT_NE(moe.err.find("Qwen3MoeForCausalLM does not run on the GPU backend"), std::string::npos) << moe.err;
  // --gpu-memory: weights that do not fit are refused before any is copied, naming the flag.
  auto small = run_kvad("run --model " + tiny("llama") + " -p hi -n 2 --device " + device + " --gpu-memory 64KiB");
  EXPECT_NE(small.exit_code, 0);
  EXPECT_NE(small.err.find("more than the 0.00 GiB kvad may use there (--gpu-memory)"), std::string::npos) << small.err;
  auto bench = run_kvad("bench --model " + tiny("llama") + " -p 4 -g 1 -r 1 --no-bandwidth --device " + device +
                        " --gpu-memory 64KiB");  // bench builds its engine options itself: the flag reaches them too
  EXPECT_NE(bench.exit_code, 0);
  EXPECT_NE(bench.err.find("(--gpu-memory)"), std::string::npos) << bench.err;
  auto unparsed = run_kvad("run --model " + tiny("llama") + " -p hi -n 2 --device " + device + " --gpu-memory lots");
  EXPECT_NE(unparsed.exit_code, 0);
  EXPECT_NE(unparsed.err.find("--gpu-memory"), std::string::npos) << unparsed.err;
  auto bad = run_kvad("run --model " + tiny("llama") + " -p hi -n 2 --device gpu:42");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("kvad devices"), std::string::npos) << bad.err;
  auto list = run_kvad("devices");
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_NE(list.out.find(device), std::string::npos) << list.out;
}
