// The trainer and the engine agree: a checkpoint saved by the trainer loads through the registry
// (with the unread-tensor guard) and the engine's logits equal the trainer's forward, for GPT-2 and
// Llama-style models. Then `kvad train` / `kvad run` / `kvad score` as a user runs them, Ctrl-C
// included.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "one_sequence.h"
#include "core/fs.h"
#include "core/rng.h"
#include "models/registry.h"
#include "models/synth.h"
#include "train/base.h"
#include "runtime/loader.h"
#include "test_support.h"
#include "train/gemm.h"
#include "train/checkpoint.h"
#include "train/model.h"

using namespace kvad;
namespace fs = std::filesystem;

namespace {

struct Case {
  const char* name;
  train::ModelShape shape;
};

std::vector<Case> cases() {
  train::ModelShape g;
  g.arch = train::Arch::Gpt2, g.vocab = 40, g.layers = 3, g.dim = 48, g.heads = 4, g.context = 40;
  train::ModelShape l = g;
  l.arch = train::Arch::Llama, l.heads = 6, l.kv_heads = 2;  // head_dim 8, grouped kv
  train::ModelShape u = l;
  u.tied = false, u.kv_heads = 6, u.ffn = 100;
  return {{"gpt2", g}, {"llama-gqa", l}, {"llama-untied", u}};
}

std::string text_for_vocab(int64_t V) {
  std::string s;
  for (int64_t i = 0; i < V; i++) s += (char)('0' + i);
  return s;
}

}  // namespace

// Tolerance: |engine - trainer| <= 1e-4 * (1 + |logit|) for every logit. Both run f32 with the
// same weights; they differ only in summation order (different kernels), ~1e-6 relative.
TEST(TrainEngine, EngineLogitsEqualTrainerForward) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    train::Model<float> m(c.shape, 1);
    m.init(3);
    Rng r(4);
    for (int64_t i = 0; i < m.num_params(); i++) m.params()[i] += (float)(0.05 * r.normal());  // no trivial norms
    std::string dir = test::temp_dir(std::string("engine_") + c.name);
    train::CheckpointData d;
    d.shape = &m.shape(), d.layout = &m.layout(), d.params = m.params();
    std::string bytes = text_for_vocab(c.shape.vocab);
    d.vocab.assign(bytes.begin(), bytes.end());
    train::save_checkpoint(dir, d);

    const int64_t T = c.shape.context;
    std::vector<int32_t> tok((size_t)T);
    for (int32_t& t : tok) t = (int32_t)r.below((uint64_t)c.shape.vocab);
    m.forward(tok.data(), nullptr, 1, T);
    std::vector<float> want(m.logits(), m.logits() + T * c.shape.vocab);

    LoadedModel lm = load_model(dir, LoadOptions{});  // registry + guard + tokenizer
    EXPECT_EQ(lm.model->parameter_count(), m.num_params());
    test::OneSequence state(*lm.model);
    std::vector<float> got(want.size());
    state.forward(tok.data(), T, got.data(), true);
    double worst = 0;
    for (size_t i = 0; i < got.size(); i++) {
      double err = std::fabs(got[i] - want[i]) / (1 + std::fabs(want[i]));
      worst = std::max(worst, err);
    }
    EXPECT_LT(worst, 1e-4);
    RecordProperty(std::string("worst_rel_err_") + c.name, fmt::format("{:.2e}", worst));
    // And the engine's tokenizer maps the vocabulary's bytes to their ids.
    std::vector<int32_t> ids = lm.tokenizer->encode(bytes, false, false);
    ASSERT_EQ(ids.size(), bytes.size());
    for (size_t i = 0; i < ids.size(); i++) EXPECT_EQ(ids[i], (int32_t)i);
  }
}

namespace {

std::string corpus(const std::string& dir) {
  const char* words[] = {"in", "the", "beginning", "god", "created", "heaven", "and", "earth", "light", "was"};
  Rng r(8);
  std::string s;
  while (s.size() < 20000) {
    int n = 4 + (int)r.below(8);
    for (int i = 0; i < n; i++) s += std::string(words[r.below(10)]) + (i + 1 < n ? " " : ".\n");
  }
  std::string p = join_path(dir, "corpus.txt");
  std::ofstream(p, std::ios::binary) << s;
  return p;
}

const char* kSmall = "--layers 2 --dim 32 --heads 4 --context 32 --batch 4 --eval-windows 4 --final-eval-windows 16";

}  // namespace

TEST(TrainCli, TrainRunScore) {
  std::string home = test::temp_dir("home");
  setenv("KVAD_HOME", home.c_str(), 1);
  std::string data = corpus(home);
  auto r = test::run_kvad(fmt::format("train --data '{}' --name tiny {} --steps 30 --eval-every 10 --save-every 20 "
                                      "--sample-chars 20 --json-out '{}/out.json'",
                                      data, kSmall, home));
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("val loss"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--- sample at step 20 ---"), std::string::npos) << r.out;
  Json j = read_json_file(join_path(home, "out.json"));
  for (const char* k : {"params", "chars_per_s_median", "step_ms_median", "final_train_loss", "val_loss", "val_bpc"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_NEAR(j["val_bpc"].get<double>(), j["val_loss"].get<double>() / std::log(2.0), 1e-3);
  // The store has it; the engine runs it by name; score reproduces the trainer's validation figure.
  std::string dir = join_path(join_path(home, "models"), "tiny");
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "optimizer.safetensors", "trainer_state.json"})
    EXPECT_TRUE(file_exists(join_path(dir, f))) << f;
  // kvad ls counts the model's weights, not the optimizer state saved beside them (twice as big).
  auto ls = test::run_kvad("ls --json");
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  Json row;
  for (size_t at = 0, nl; (nl = ls.out.find('\n', at)) != std::string::npos; at = nl + 1) {
    Json j = Json::parse(ls.out.substr(at, nl - at));
    if (j["name"] == "tiny" && j["source"] == "store") row = j;
  }
  ASSERT_FALSE(row.is_null()) << ls.out;
  EXPECT_EQ(row["bytes"].get<uint64_t>(), (uint64_t)std::filesystem::file_size(join_path(dir, "model.safetensors"))) << ls.out;
  auto run = test::run_kvad("run --model tiny --prompt 'in the' -n 10 --seed 1");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_GE(run.out.size(), 10u);
  auto sc = test::run_kvad(fmt::format("score --model tiny --data '{}' --split val --json --max-chars 0", data));
  ASSERT_EQ(sc.exit_code, 0) << sc.err;
  Json s = Json::parse(sc.out);
  // The trainer scored the first 16 windows only (--final-eval-windows 16); score all of them
  // with --max-chars = 16 windows + 1.
  auto sc16 = test::run_kvad(fmt::format("score --model tiny --data '{}' --split val --json --max-chars {}", data,
                                         16 * 32 + 1));
  Json s16 = Json::parse(sc16.out);
  EXPECT_NEAR(s16["bits_per_char"].get<double>(), j["val_bpc"].get<double>(), 2e-4);
  EXPECT_GT(s["chars"].get<int64_t>(), 1000);
  // An existing name is refused; --resume continues; --force replaces.
  auto again = test::run_kvad(fmt::format("train --data '{}' --name tiny {} --steps 5", data, kSmall));
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_NE(again.err.find("already exists"), std::string::npos) << again.err;
  auto more = test::run_kvad("train --name tiny --resume --steps 34 --sample-chars 0");
  EXPECT_EQ(more.exit_code, 0) << more.err;
  EXPECT_NE(more.out.find("resuming"), std::string::npos) << more.out;
  // run and chat without --model take $KVAD_DEFAULT_MODEL (a store name here).
  setenv("KVAD_DEFAULT_MODEL", "tiny", 1);
  auto def = test::run_kvad("run --prompt 'in the' -n 5 --seed 3");
  EXPECT_EQ(def.exit_code, 0) << def.err;
  auto chat = test::run_kvad("chat -n 5 --seed 3", "in the\nearth\n");
  EXPECT_EQ(chat.exit_code, 0) << chat.err;
  // Each turn prompts with the last message only ("earth": 5 characters).
  EXPECT_NE(chat.err.find("prompt 5 tokens"), std::string::npos) << chat.err;
  setenv("KVAD_DEFAULT_MODEL", join_path(home, "nowhere").c_str(), 1);
  EXPECT_EQ(test::run_kvad("run --prompt x -n 2").exit_code, 1);
  unsetenv("KVAD_DEFAULT_MODEL");
  unsetenv("KVAD_HOME");
}

// --precision bf16 as users type it: the run trains and says so in its state, a resumed run may
// switch back to f32 (a speed choice), and a CPU without AVX512-BF16 gets an error naming the flag.
TEST(TrainCli, Bf16Precision) {
  std::string home = test::temp_dir("home-bf16");
  setenv("KVAD_HOME", home.c_str(), 1);
  std::string data = corpus(home);
  auto r = test::run_kvad(fmt::format("train --data '{}' --name tb {} --steps 12 --eval-every 0 --sample-chars 0 "
                                      "--precision bf16",
                                      data, kSmall));
  if (!train::bf16_gemm_supported()) {
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("--precision bf16 needs a CPU with AVX512-BF16"), std::string::npos) << r.err;
    unsetenv("KVAD_HOME");
    GTEST_SKIP() << "SKIPPED: this CPU has no AVX512-BF16; the refusal was checked";
  }
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE((r.out + r.err).find("; bf16 products"), std::string::npos) << r.out << r.err;
  const std::string dir = join_path(join_path(home, "models"), "tb");
  EXPECT_EQ(read_json_file(join_path(dir, "trainer_state.json"))["config"]["precision"], "bf16");
  auto more = test::run_kvad("train --name tb --resume --steps 16 --sample-chars 0 --precision f32");
  ASSERT_EQ(more.exit_code, 0) << more.err;
  // Back on f32 on a CPU that has the bf16 products, the start line names the flag.
  EXPECT_NE((more.out + more.err).find("f32 products (this CPU has AVX512-BF16: --precision bf16"), std::string::npos)
      << more.out << more.err;
  EXPECT_EQ(read_json_file(join_path(dir, "trainer_state.json"))["config"]["precision"], "f32");
  EXPECT_NE(test::run_kvad("train --name tb --resume --steps 20 --precision f16").exit_code, 0);
  unsetenv("KVAD_HOME");
}

// The model README's first command runs: shipped in the source tree, found without --model.
TEST(TrainCli, ShippedDefaultModelRuns) {
  if (!fs::exists(test::source_path("models/kvad-kjv/config.json"))) GTEST_SKIP() << "no models/kvad-kjv";
  unsetenv("KVAD_DEFAULT_MODEL");
  auto r = test::run_kvad("run --prompt 'And God said' -n 40 --seed 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GE(r.out.size(), 40u);
  Json cfg = read_json_file(test::source_path("models/kvad-kjv/config.json"));
  EXPECT_EQ(cfg["architectures"][0], "GPT2LMHeadModel");
  EXPECT_LE(fs::file_size(test::source_path("models/kvad-kjv/model.safetensors")), 20u << 20);
}

TEST(TrainCli, CtrlCSavesAndResumes) {
  std::string home = test::temp_dir("home_int");
  setenv("KVAD_HOME", home.c_str(), 1);
  std::string data = corpus(home), out = join_path(home, "stdout");
  std::ofstream(out) << "";
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::string args = fmt::format("train --data {} --name int {} --steps 100000 --eval-every 0 --sample-chars 0", data,
                                   kSmall);
    execl("/bin/sh", "sh", "-c", (std::string("exec '") + KVAD_BINARY + "' " + args).c_str(), (char*)nullptr);
    _exit(127);
  }
  // Wait until training has started (the handler is installed before that line), then Ctrl-C.
  for (int i = 0; i < 600 && read_file(out).find("training gpt2") == std::string::npos; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << read_file(out);
  EXPECT_EQ(WEXITSTATUS(status), 130) << read_file(out);
  EXPECT_NE(read_file(out).find("interrupted: saved step"), std::string::npos) << read_file(out);
  std::string dir = join_path(join_path(home, "models"), "int");
  Json st = read_json_file(join_path(dir, "trainer_state.json"));
  int64_t step = st["step"];
  EXPECT_GE(step, 1);
  for (const auto& e : fs::directory_iterator(join_path(home, "models")))
    EXPECT_EQ(e.path().filename().string(), "int") << "a temporary folder was left behind";
  auto more = test::run_kvad(fmt::format("train --name int --resume --steps {} --sample-chars 0", step + 3));
  EXPECT_EQ(more.exit_code, 0) << more.err;
  EXPECT_EQ(read_json_file(join_path(dir, "trainer_state.json"))["step"], step + 3);
  unsetenv("KVAD_HOME");
}

TEST(TrainCli, BadInputIsAClearError) {
  std::string home = test::temp_dir("home_bad");
  setenv("KVAD_HOME", home.c_str(), 1);
  std::string empty = join_path(home, "empty.txt");
  std::ofstream(empty) << "";
  auto r = test::run_kvad(fmt::format("train --data '{}' --name x", empty));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("empty"), std::string::npos) << r.err;
  r = test::run_kvad("train --data /nonexistent --name x");
  EXPECT_NE(r.err.find("no such file"), std::string::npos) << r.err;
  r = test::run_kvad(fmt::format("train --data '{}' --name ../x", empty));
  EXPECT_NE(r.err.find("not a path"), std::string::npos) << r.err;
  r = test::run_kvad("train --name missing --resume");
  EXPECT_NE(r.err.find("no model"), std::string::npos) << r.err;
  r = test::run_kvad(fmt::format("train --data '{}' --name x --arch gpt2 --kv-heads 2", corpus(home)));
  EXPECT_NE(r.err.find("llama"), std::string::npos) << r.err;
  r = test::run_kvad(fmt::format("train --data '{}' --name x --dim 65536 --layers 256 --heads 64", corpus(home)));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("GB"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(join_path(join_path(home, "models"), "x")));
  unsetenv("KVAD_HOME");
}

// A Hugging Face base read into the trainer's layout (train/base.h) computes what the engine
// computes from the same folder: every family the trainer fine-tunes (llama with llama3 rope
// scaling, qwen2's q/k/v biases, qwen3's q/k norms and wider heads, gpt2's Conv1D and position
// table longer than the context trained at), at f32 and rounded through q8.
TEST(TrainBase, EveryFamilyComputesWhatTheEngineComputes) {
  for (const char* arch : {"llama", "qwen2", "qwen3", "gpt2"}) {
    SCOPED_TRACE(arch);
    std::string dir = test::temp_dir(std::string("base_") + arch);
    SynthOptions so;
    so.arch = arch, so.preset = "tiny-v512", so.out = dir, so.seed = 5, so.dtype = DType::F32, so.std = 0.08;
    so.norm_jitter = 0.2;  // norms and biases that matter
    synthesize(so);
    for (const char* quant : {"", "q8"}) {
      SCOPED_TRACE(quant);
      const int64_t T = 24;
      train::BaseModel base = train::load_base_model(dir, T, 4096, quant);
      EXPECT_EQ(base.shape.context, T);
      train::Model<float> m(base.shape, 1);
      ASSERT_EQ((int64_t)base.params.size(), m.num_params());
      std::copy(base.params.begin(), base.params.end(), m.params());
      Rng r(6);
      std::vector<int32_t> tok((size_t)T);
      for (int32_t& t : tok) t = (int32_t)r.below(512);
      m.forward(tok.data(), nullptr, 1, T);
      std::vector<float> want(m.logits(), m.logits() + T * base.shape.vocab);

      LoadOptions lo;
      lo.format = *quant ? WeightFormat::Q8 : WeightFormat::F32;
      std::unique_ptr<Model> engine = load_model_dir(dir, lo);
      if (!*quant) {
        EXPECT_EQ(engine->parameter_count(), m.num_params());
      }
      test::OneSequence state(*engine);
      std::vector<float> got(want.size());
      state.forward(tok.data(), T, got.data(), true);
      double worst = 0, scale = 0;
      for (size_t i = 0; i < got.size(); i++) {
        worst = std::max(worst, (double)std::fabs(got[i] - want[i]));
        scale = std::max(scale, (double)std::fabs(want[i]));
      }
      // f32: summation order only. q8: the same weights, but the engine also rounds activations
      // to int8 for its integer dot products, which the trainer (f32 activations) does not.
      EXPECT_LT(worst, (*quant ? 3e-2 : 1e-5) * scale) << "max|logit| " << scale;
      if (*quant) {  // and the rounding is what brought it there: the unrounded base is further off
        train::BaseModel f = train::load_base_model(dir, T, 4096, "");
        std::copy(f.params.begin(), f.params.end(), m.params());
        m.forward(tok.data(), nullptr, 1, T);
        double unrounded = 0;
        for (size_t i = 0; i < got.size(); i++) unrounded = std::max(unrounded, (double)std::fabs(got[i] - m.logits()[i]));
        EXPECT_LT(worst, 0.85 * unrounded);  // measured 0.62-0.75
      }
      RecordProperty(fmt::format("worst_{}_{}", arch, *quant ? quant : "f32"), fmt::format("{:.2e}", worst / scale));
    }
  }
}

TEST(TrainBase, WhatTheTrainerCannotComputeIsRefusedByName) {
  std::string dir = test::temp_dir("base_refused");
  SynthOptions so;
  so.arch = "qwen3_moe", so.preset = "tiny", so.out = dir, so.dtype = DType::F32;
  synthesize(so);
  try {
    train::load_base_model(dir, 16, 4096, "");
    FAIL() << "a MoE base loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot be a fine-tuning base"), std::string::npos) << e.what();
  }
  EXPECT_THROW(train::load_base_model(test::temp_dir("base_empty"), 16, 4096, ""), Error);
}

// kvad train --lora as a user runs it: an adapter for the shipped default model learns a text
// (validation below the base's, which it reports first), is saved as a PEFT folder in the store,
// and the engine runs it by name (`--lora NAME`) scoring the validation text exactly as the trainer
// did; Ctrl-C-free resume continues it; what cannot be trained is refused with the reason.
TEST(TrainLoraCli, FineTuneScoreRunResume) {
  std::string base = test::source_path("models/kvad-kjv");
  if (!fs::exists(join_path(base, "config.json"))) GTEST_SKIP() << "no models/kvad-kjv";
  std::string home = test::temp_dir("home_lora");
  setenv("KVAD_HOME", home.c_str(), 1);
  std::string data = corpus(home);
  const char* small = "--context 64 --batch 4 --eval-every 10 --eval-windows 8 --final-eval-windows 8";
  auto r = test::run_kvad(fmt::format("train --lora --base '{}' --data '{}' --name ad {} --steps 20 --lr 3e-3 "
                                      "--json-out '{}/out.json'",
                                      base, data, small, home));
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("step 0 (the base): val loss"), std::string::npos) << r.out;
  Json j = read_json_file(join_path(home, "out.json"));
  EXPECT_LT(j["val_bpc"].get<double>(), j["base_val_bpc"].get<double>() - 0.1) << j.dump();
  EXPECT_EQ(j["params"].get<int64_t>(), 4 * 16 * ((256 + 768) + (256 + 256) + (256 + 1024) + (1024 + 256)));
  std::string dir = join_path(join_path(home, "adapters"), "ad");
  for (const char* f : {"adapter_config.json", "adapter_model.safetensors", "optimizer.safetensors", "trainer_state.json"})
    EXPECT_TRUE(file_exists(join_path(dir, f))) << f;
  Json cfg = read_json_file(join_path(dir, "adapter_config.json"));
  EXPECT_EQ(cfg["peft_type"], "LORA");
  EXPECT_EQ(cfg["r"], 16);
  EXPECT_EQ(cfg["target_modules"], Json({"c_attn", "c_fc", "c_proj"}));
  EXPECT_EQ(cfg["fan_in_fan_out"], true);
  // The engine with the adapter scores the trainer's 8 validation windows as the trainer did.
  auto sc = test::run_kvad(fmt::format("score --model '{}' --lora ad --data '{}' --split val --json --context 64 "
                                       "--max-chars {}",
                                       base, data, 8 * 64 + 1));
  ASSERT_EQ(sc.exit_code, 0) << sc.err;
  EXPECT_NEAR(Json::parse(sc.out)["bits_per_char"].get<double>(), j["val_bpc"].get<double>(), 2e-4) << sc.out;
  auto run = test::run_kvad(fmt::format("run --model '{}' --lora ad --prompt 'in the' -n 8 --seed 1", base));
  EXPECT_EQ(run.exit_code, 0) << run.err;
  auto more = test::run_kvad("train --lora --name ad --resume --steps 23");
  ASSERT_EQ(more.exit_code, 0) << more.err << more.out;
  EXPECT_NE(more.out.find("resuming a LoRA adapter"), std::string::npos) << more.out;
  EXPECT_EQ(read_json_file(join_path(dir, "trainer_state.json"))["step"], 23);
  // Refused with the reason, before any work.
  struct Bad {
    std::string args, says;
  };
  std::vector<Bad> bad = {
      {fmt::format("train --lora --data '{}' --name x", data), "--base MODEL is required"},
      {fmt::format("train --base '{}' --data '{}' --name x", base, data), "is an option of --lora"},
      {fmt::format("train --lora --base '{}' --data '{}' --name x --arch llama", base, data), "is the base's"},
      {fmt::format("train --lora --base '{}' --data '{}' --name x --targets q_proj", base, data), "q_proj"},
      {fmt::format("train --lora --base '{}' --data '{}' --name ad", base, data), "already exists"},
      {fmt::format("train --lora --base '{}' --data '{}' --name x", home, data), "config.json"},
  };
  for (const Bad& b : bad) {
    auto e = test::run_kvad(b.args);
    EXPECT_EQ(e.exit_code, 1) << b.args << "\n" << e.err;
    EXPECT_NE(e.err.find(b.says), std::string::npos) << b.args << "\n" << e.err;
  }
  unsetenv("KVAD_HOME");
}

// Chat JSONL on a base with a real chat template (the tiny Qwen3 synth writes Qwen3's): the loss
// is on the assistant's turns, and it falls.
TEST(TrainLoraCli, ChatJsonlOnAQwen3Base) {
  std::string home = test::temp_dir("home_lora_chat");
  setenv("KVAD_HOME", home.c_str(), 1);
  std::string base = join_path(home, "q3");
  auto s = test::run_kvad(fmt::format("synth --arch qwen3 --preset tiny --out '{}' --dtype f32 --seed 2", base));
  ASSERT_EQ(s.exit_code, 0) << s.err;
  std::string data = join_path(home, "chat.jsonl");
  const char* colours[] = {"red", "green", "blue", "white", "black"};
  test::write_chat_jsonl(data, 40, [&](int i) {
    return std::pair(fmt::format("What colour is thing {}?", i), fmt::format("Thing {} is {}.", i, colours[i % 5]));
  });
  // --context 48 holds every conversation (~35 tokens) whole; the default (512) made the 151,936-wide
  // logits buffers 4x larger for nothing: 27 s of the sanitised run (1.5 GB RSS against 0.4 GB).
  auto r = test::run_kvad(fmt::format("train --lora --base '{}' --data '{}' --name chat --steps 20 --batch 4 "
                                      "--lr 3e-2 --eval-every 0 --context 48 --json-out '{}/out.json'",
                                      base, data, home));
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("chat, 40 conversations (4 validation)"), std::string::npos) << r.out;
  // A random base's logits move slowly through adapters on its projections (11.93 -> 11.56 nats
  // in 25 steps, measured); from an unchanged start, any fall is learning.
  Json j = read_json_file(join_path(home, "out.json"));
  Json state = read_json_file(join_path(join_path(join_path(home, "adapters"), "chat"), "trainer_state.json"));
  EXPECT_LT(j["val_loss"].get<double>(), state["base_val"]["loss"].get<double>() - 0.15) << j.dump();
  Json cfg = read_json_file(join_path(join_path(join_path(home, "adapters"), "chat"), "adapter_config.json"));
  EXPECT_EQ(cfg["target_modules"],
            Json({"down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"}));
  auto run = test::run_kvad(fmt::format("run --model '{}' --lora chat --prompt 'What colour is thing 3?' -n 6", base));
  EXPECT_EQ(run.exit_code, 0) << run.err;
  unsetenv("KVAD_HOME");
}
