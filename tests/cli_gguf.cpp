// GGUF files through the CLI as users run them: run and tokenize a .gguf, --quant refused on one,
// --quant q4k/q6k on a Hugging Face checkpoint (refused up front when a width is not a multiple of
// 256, naming q8 and q4), a truncated file named in a one-line error; and every family's GGUF
// description against what the peer's llama.cpp-style converter writes.
#include <gtest/gtest.h>

#include <fstream>

#include "core/fs.h"
#include "models/registry.h"
#include "test_support.h"

using namespace kvad;
using test::run_kvad;

namespace {

std::string fixture(const std::string& name) { return test::source_path("tests/fixtures/gguf/" + name + ".gguf"); }

}  // namespace

TEST(CliGguf, RunAndTokenizeAGgufFile) {
  auto r = run_kvad("run --model " + fixture("llama-q4_k_m") + " --prompt-tokens 15,284,72 -n 4 --temperature 0 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("{\"id\":"), std::string::npos) << r.out;
  auto t = run_kvad("tokenize --model " + fixture("qwen2-q6_k") + " \"hello there\"");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_EQ(t.out.substr(0, 1), "[");
}

TEST(CliGguf, QuantFlagOnAGgufFileIsRefused) {
  auto r = run_kvad("run --model " + fixture("gpt2-q8_0") + " --prompt hi -n 1 --quant q4");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--quant q4 does not apply to a GGUF file"), std::string::npos) << r.err;
}

TEST(CliGguf, KQuantFormatsForHuggingFaceCheckpoints) {
  std::string narrow = test::temp_dir("narrow"), wide = test::temp_dir("wide");
  ASSERT_EQ(run_kvad("synth --arch qwen2 --preset tiny --out " + narrow).exit_code, 0);
  ASSERT_EQ(run_kvad("synth --arch llama --preset tiny-kq --out " + wide).exit_code, 0);
  auto r = run_kvad("run --model " + narrow + " --prompt hi -n 1 --quant q4k");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("multiple of 256"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--quant q8 or q4"), std::string::npos) << r.err;
  for (const char* q : {"q4k", "q6k"}) {
    r = run_kvad("run --model " + wide + " --prompt hi -n 2 --quant " + q);
    EXPECT_EQ(r.exit_code, 0) << q << ": " << r.err;
  }
}

TEST(CliGguf, BrokenFileIsAClearError) {
  std::string d = test::temp_dir("broken-gguf");
  std::string bytes;
  {
    std::ifstream in(fixture("llama-q4_0"), std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::ofstream(d + "/cut.gguf", std::ios::binary).write(bytes.data(), (std::streamsize)(bytes.size() / 2));
  auto r = run_kvad("run --model " + d + "/cut.gguf --prompt hi -n 1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cut.gguf"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("truncated"), std::string::npos) << r.err;
}

// The peer's converter writes the tensor names and metadata of llama.cpp's convert_hf_to_gguf.py:
// each family's GGUF description (metadata keys, tensor names, Q/K permutation, Conv1D layout)
// must read every tensor of it (the unread-tensor guard) and count what the folder counts.
TEST(CliGguf, EveryGgufArchitectureReadsWhatThePeersConverterWrites) {
  std::string peer = test::source_path("../shared/peer/to_gguf.py");
  if (!file_exists(peer) || !file_exists("/usr/bin/python3")) GTEST_SKIP() << "no peer converter at " << peer;
  int checked = 0;
  for (const Architecture& a : architectures()) {
    if (!a.gguf) continue;
    SCOPED_TRACE(a.model_type);
    std::string dir = test::temp_dir("peer-gguf-" + a.model_type), out = dir + ".gguf";
    ASSERT_EQ(run_kvad("synth --arch " + a.model_type + " --preset tiny-v512 --dtype f32 --out " + dir).exit_code, 0);
    std::string cmd = "/usr/bin/python3 " + peer + " " + dir + " " + out + " --type f32 > " + out + ".log 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << read_file(out + ".log");
    std::unique_ptr<Model> st = load_model_dir(dir, {}), gg = load_model_gguf(out, {});
    EXPECT_EQ(gg->config().architecture, a.name);
    EXPECT_EQ(gg->parameter_count(), st->parameter_count());
    EXPECT_EQ(gg->weight_bytes(), st->weight_bytes());
    checked++;
  }
  EXPECT_EQ(checked, 7);  // llama, qwen2, qwen3, qwen3moe, deepseek2, gpt2, qwen3next
}
