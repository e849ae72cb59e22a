// Bad input gets a clear error naming the file/field and what is wrong, exit code 1, no crash.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/fs.h"
#include "core/json.h"
#include "test_support.h"

using namespace kvad;
using test::run_kvad;
namespace fs = std::filesystem;

namespace {

std::string fresh_model(const std::string& arch = "qwen2") {
  std::string d = test::temp_dir("bad-" + arch);
  auto r = run_kvad("synth --arch " + arch + " --preset tiny --dtype f32 --out " + d);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return d;
}

void expect_error(const std::string& args, const std::string& needle) {
  auto r = run_kvad(args);
  EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.err;
  EXPECT_NE(r.err.find("kvad: error:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "expected '" << needle << "' in: " << r.err;
}

void edit_config(const std::string& dir, const std::function<void(Json&)>& f) {
  Json c = read_json_file(dir + "/config.json");
  f(c);
  atomic_write_file(dir + "/config.json", c.dump());
}

std::string run_args(const std::string& dir) { return "run --model " + dir + " --prompt hello -n 2"; }

}  // namespace

TEST(BadInput, MissingModelFilesAreNamed) {
  expect_error("run --model /nonexistent/model --prompt x", "no such model folder");
  std::string d = fresh_model();
  fs::remove(d + "/tokenizer.json");
  expect_error(run_args(d), "missing tokenizer.json");
  std::string e = fresh_model();
  fs::remove(e + "/config.json");
  expect_error(run_args(e), "config.json: cannot open");
  std::string w = fresh_model();
  fs::remove(w + "/model.safetensors");
  expect_error(run_args(w), "no model.safetensors or model.safetensors.index.json");
}

TEST(BadInput, TruncatedOrCorruptSafetensors) {
  std::string d = fresh_model();
  fs::resize_file(d + "/model.safetensors", fs::file_size(d + "/model.safetensors") / 2);
  expect_error(run_args(d), "out of bounds");
  std::string e = fresh_model();
  {
    std::fstream f(e + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(9);
    f.write("XXXX", 4);  // break the JSON header
  }
  expect_error(run_args(e), "invalid JSON");
  std::string g = fresh_model();
  std::ofstream(g + "/model.safetensors", std::ios::trunc) << "abc";
  expect_error(run_args(g), "not a safetensors file");
}

TEST(BadInput, ConfigProblemsNameTheField) {
  std::string d = fresh_model();
  edit_config(d, [](Json& c) { c.erase("architectures"); c.erase("model_type"); });
  expect_error(run_args(d), "no 'architectures' or 'model_type'");
  edit_config(d, [](Json& c) { c["architectures"] = {"MambaForCausalLM"}; });
  expect_error(run_args(d), "supported: LlamaForCausalLM");
  std::string e = fresh_model();
  edit_config(e, [](Json& c) { c["hidden_size"] = 128; });
  expect_error(run_args(e), "expected [151936, 128]");
  std::string f = fresh_model();
  edit_config(f, [](Json& c) { c["num_attention_heads"] = "four"; });
  expect_error(run_args(f), "field 'num_attention_heads' must be an integer");
  std::string g = fresh_model();
  edit_config(g, [](Json& c) { c["num_key_value_heads"] = 3; });
  expect_error(run_args(g), "must be a multiple of num_key_value_heads");
  std::string h = fresh_model();
  std::ofstream(h + "/config.json", std::ios::trunc) << "{ not json";
  expect_error(run_args(h), "config.json: invalid JSON");
}

TEST(BadInput, UnexpectedAndMissingTensors) {
  std::string d = fresh_model("qwen3");
  edit_config(d, [](Json& c) { c["tie_word_embeddings"] = true; });  // lm_head.weight is now unread
  expect_error(run_args(d), "lm_head.weight");
  std::string e = fresh_model("llama");
  edit_config(e, [](Json& c) { c["model_type"] = "qwen3"; c["architectures"] = {"Qwen3ForCausalLM"}; });
  expect_error(run_args(e), "missing required tensor 'model.layers.0.self_attn.q_norm.weight'");
}

TEST(BadInput, TokenizerAndTemplateProblems) {
  std::string d = fresh_model();
  std::ofstream(d + "/tokenizer.json", std::ios::trunc) << "{\"model\": 5}";
  expect_error(run_args(d), "tokenizer.json");
  std::string e = fresh_model();
  Json tc = read_json_file(e + "/tokenizer_config.json");
  tc["chat_template"] = "{% for m in messages %}{{ m.content ";
  atomic_write_file(e + "/tokenizer_config.json", tc.dump());
  auto plain = run_kvad(run_args(e));
  EXPECT_EQ(plain.exit_code, 0) << "a broken chat template must not stop plain completion: " << plain.err;
  expect_error("run --model " + e + " --prompt hi --chat -n 2", "chat_template");
}

TEST(BadInput, PromptProblems) {
  std::string d = fresh_model("gpt2");  // context 256
  std::string long_ids = "1";
  for (int i = 0; i < 300; i++) long_ids += ",1";
  expect_error("run --model " + d + " --prompt-tokens " + long_ids, "context is 256 tokens");
  expect_error("run --model " + d + " --prompt-tokens 1,99999999", "out of range");
  expect_error("run --model " + d + " --prompt-tokens 1,x", "'x' is not a token id");
  expect_error("run --model " + d + " --prompt ''", "run: no prompt");
  expect_error("run --model " + d + " --prompt hi --top-p 0", "top_p must be in (0, 1]");
}

TEST(CliBadInput, MistypedCommandsAndForeignOptionsAreNamed) {
  // A typo names the command and the nearest one; llama.cpp's multi-letter options (-ngl, -np)
  // are unknown options, not -n with the value "gl"; usage errors exit 2, as CLI11's own do.
  auto r = run_kvad("runn --prompt hi");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown command 'runn' (did you mean 'run'?)"), std::string::npos) << r.err;
  r = run_kvad("run -ngl 99 --prompt hi");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown option '-ngl'"), std::string::npos) << r.err;
  r = run_kvad("bench -np 4");
  EXPECT_NE(r.err.find("unknown option '-np'"), std::string::npos) << r.err;
  r = run_kvad("-v");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out.rfind("kvad ", 0), 0u) << r.out;
}
