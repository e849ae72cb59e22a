// GGUF files through the CLI as users run them: run and tokenize a .gguf, --quant refused on one,
// --quant q4k/q6k on a Hugging Face checkpoint (refused up front when a width is not a multiple of
// 256, naming q8 and q4), a truncated file named in a one-line error.
#include <gtest/gtest.h>

#include <fstream>

#include "core/fs.h"
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
