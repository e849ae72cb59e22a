// --lora on the command line: an adapter changes what `kvad run` says and the scale is read from
// PATH:SCALE; an adapter that does not load is exit 1 naming the file or tensor; `kvad bench
// --lora` measures the base and the adapted model and prints their ratio. And the trainer's PEFT
// adapters (train/lora.h) run in the engine as the trainer's own merge of them.
#include <gtest/gtest.h>

#include <cmath>

#include <fmt/format.h>

#include "core/fs.h"
#include "core/json.h"
#include "core/rng.h"
#include "one_sequence.h"
#include "runtime/loader.h"
#include "runtime/lora.h"
#include "test_support.h"
#include "train/checkpoint.h"
#include "train/lora.h"
#include "train/model.h"
#include "gpu_device.h"

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

// On the GPU (lavapipe, named) the adapted answer is the CPU's, two adapters stacked too.
TEST(CliLora, TheGpuRunsAdaptersAsTheCpuDoes) {
  KVAD_NEED_GPU(device);
  const std::string adapter = test::source_path("tests/golden/lora/qwen2");
  for (const std::string& lora : {" --lora " + adapter, " --lora " + adapter + " --lora " + adapter + ":0.5"}) {
    SCOPED_TRACE(lora);
    const std::string cpu = run_ids(lora), gpu = run_ids(lora + " --device " + device);
    EXPECT_FALSE(cpu.empty());
    EXPECT_EQ(gpu, cpu);
  }
  EXPECT_NE(run_ids(" --lora " + adapter + " --device " + device), run_ids(" --device " + device));
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

namespace {

std::string save_trainer_model(const train::Model<float>& m, const float* params, const std::string& dir) {
  train::CheckpointData d;
  d.shape = &m.shape(), d.layout = &m.layout(), d.params = params;
  for (int64_t i = 0; i < m.shape().vocab; i++) d.vocab.push_back((uint8_t)('0' + i));
  train::save_checkpoint(dir, d);
  return dir;
}

std::vector<float> engine_logits(const std::string& dir, const std::vector<std::string>& loras,
                                 const std::vector<int32_t>& tok) {
  LoadedModel lm = load_model(dir, LoadOptions{});
  lm.loras = load_loras(loras, *lm.model);  // what --lora does
  test::OneSequence seq(*lm.model, 16, 4096, lora_uses(lm.loras));
  std::vector<float> out(tok.size() * (size_t)lm.model->config().vocab_size);
  seq.forward(tok.data(), (int64_t)tok.size(), out.data(), true);
  return out;
}

double worst_rel(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); i++) worst = std::max(worst, (double)std::fabs(got[i] - want[i]) / (1 + std::fabs(want[i])));
  return worst;
}

}  // namespace

// A trainer model saved as a base and an adapter with random A and B saved by save_peft_adapter
// run in the engine (unmerged, through load_loras) with the logits of the trainer's merge
// (lora_merge: W rows += s B A in the fused layout) saved as a plain checkpoint: the PEFT names,
// shapes and orientation are the run-time side's, GPT-2's fused Conv1D c_attn included.
TEST(CliLora, TrainerAdapterRunsAsItsMerge) {
  train::ModelShape g;
  g.arch = train::Arch::Gpt2, g.vocab = 40, g.layers = 3, g.dim = 48, g.heads = 4, g.context = 40;
  train::ModelShape l = g;
  l.arch = train::Arch::Llama, l.heads = 6, l.kv_heads = 2;
  struct Case {
    const char* name;
    train::ModelShape shape;
    train::LoraConfig lora;
  };
  for (const Case& c : {Case{"gpt2", g, {4, 8, false, {"c_attn", "c_proj", "c_fc"}}},
                        Case{"gpt2-c_proj", g, {2, 3, false, {"c_proj"}}},
                        Case{"llama", l, {4, 8, false, {"all-linear"}}},
                        Case{"llama-rslora", l, {8, 4, true, {"k_proj", "v_proj", "up_proj", "down_proj"}}}}) {
    SCOPED_TRACE(c.name);
    train::Model<float> m(c.shape, 1);
    m.init(3);
    Rng r(4);
    for (int64_t i = 0; i < m.num_params(); i++) m.params()[i] += (float)(0.05 * r.normal());
    const std::string root = test::temp_dir(std::string("trainer-lora-") + c.name);
    const std::string base = save_trainer_model(m, m.params(), join_path(root, "base"));

    train::LoraLayout L = train::make_lora_layout(m.shape(), c.lora);
    std::vector<float> adapter((size_t)L.total());
    for (float& v : adapter) v = (float)(0.15 * r.normal());
    train::AdapterSaveInfo info;
    info.base_model = base;
    train::save_peft_adapter(join_path(root, "adapter"), L, adapter.data(), info);
    std::vector<float> merged(m.params(), m.params() + m.num_params());
    train::lora_merge(merged.data(), m.layout(), L, adapter.data());
    const std::string merged_dir = save_trainer_model(m, merged.data(), join_path(root, "merged"));

    std::vector<int32_t> tok((size_t)c.shape.context);
    for (int32_t& t : tok) t = (int32_t)r.below((uint64_t)c.shape.vocab);
    std::vector<float> adapted = engine_logits(base, {join_path(root, "adapter")}, tok);
    std::vector<float> want = engine_logits(merged_dir, {}, tok), plain = engine_logits(base, {}, tok);
    double err = worst_rel(adapted, want), effect = worst_rel(plain, want);
    EXPECT_LT(err, 1e-4);
    EXPECT_GT(effect, 100 * err + 0.05) << "the adapter must change the logits for the check to mean anything";
    RecordProperty(std::string("worst_rel_err_") + c.name, fmt::format("{:.2e} (adapter effect {:.2e})", err, effect));
  }
}
