// The training loop end to end on small models: memorising a sequence, bit-identical loss curves
// (same seed; any thread count), resume = uninterrupted run, checkpoints that round-trip, the
// tokenizer.json that reproduces the trainer's ids, and bad input refused with nothing left behind.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/fs.h"
#include "core/rng.h"
#include "core/threads.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/optim.h"
#include "train/trainer.h"

using namespace kvad;
using namespace kvad::train;
namespace fs = std::filesystem;

namespace {

// A small text with structure to learn (about 12 KB, 30-odd distinct bytes).
std::string synthetic_text() {
  const char* words[] = {"the", "lord", "said", "unto", "moses", "and", "they", "went", "forth", "into",
                         "land", "of",  "light", "waters", "day", "night", "earth", "heaven"};
  Rng r(5);
  std::string s;
  for (int verse = 1; s.size() < 12000; verse++) {
    s += std::to_string(verse % 50 + 1) + " ";
    int n = 5 + (int)r.below(8);
    for (int i = 0; i < n; i++) s += std::string(words[r.below(18)]) + (i + 1 < n ? " " : ".\n");
  }
  return s;
}

std::string write_corpus(const std::string& dir, const std::string& text) {
  std::string p = join_path(dir, "corpus.txt");
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

TrainOptions small_options(const std::string& data, const std::string& dir) {
  TrainOptions o;
  o.data = data;
  o.dir = dir;
  o.shape.layers = 2, o.shape.dim = 32, o.shape.heads = 4, o.shape.context = 32;
  o.batch = 4, o.steps = 12, o.lr.lr = 3e-3, o.lr.min_lr = -1, o.lr.warmup = 3;
  o.eval_every = 0, o.save_every = 0, o.final_eval_windows = 8, o.sample_chars = 0;
  return o;
}

TrainHooks quiet_hooks() {
  TrainHooks h;
  h.out = nullptr;
  h.progress = nullptr;
  return h;
}

std::vector<double> loss_curve(const std::string& dir) {
  Json s = read_json_file(join_path(dir, "trainer_state.json"));
  return s.at("losses").get<std::vector<double>>();
}

}  // namespace

TEST(TrainLoop, MemorisesOneSequence) {
  set_threads(1);  // tiny model: the pool's hand-offs would cost more than they save
  for (Arch arch : {Arch::Gpt2, Arch::Llama}) {
    SCOPED_TRACE(arch_name(arch));
    ModelShape s;
    s.arch = arch, s.vocab = 20, s.layers = 2, s.dim = 32, s.heads = 4, s.context = 24;
    Model<float> m(s, 1);
    m.init(1);
    AdamW opt(m.layout(), AdamWConfig{});
    Rng r(2);
    std::vector<int32_t> seq(25);
    for (int32_t& t : seq) t = (int32_t)r.below(20);
    double loss = 0;
    for (int step = 1; step <= 300; step++) {
      loss = m.forward(seq.data(), seq.data() + 1, 1, 24);
      m.backward();
      opt.update(m.params(), m.grads(), step, 1e-2);
    }
    EXPECT_LT(loss, 0.02) << "a 2-layer model should drive the loss on one sequence of 24 to ~0";
  }
  set_threads(0);
}

TEST(TrainLoop, SameSeedSameCurveAnyThreadCount) {
  std::string tmp = test::temp_dir("train_det");
  std::string data = write_corpus(tmp, synthetic_text());
  std::vector<std::vector<double>> curves;
  for (int threads : {2, 2, 1}) {
    TrainOptions o = small_options(data, join_path(tmp, "m" + std::to_string(curves.size())));
    o.threads = threads;
    TrainResult r = run_training(o, quiet_hooks());
    EXPECT_FALSE(r.interrupted);
    curves.push_back(loss_curve(o.dir));
  }
  set_threads(0);
  ASSERT_EQ(curves[0].size(), 12u);
  EXPECT_EQ(curves[0], curves[1]) << "same seed and threads must give a bit-identical loss curve";
  EXPECT_EQ(curves[0], curves[2]) << "the sums are ordered independently of the thread count";
  EXPECT_LT(curves[0].back(), curves[0].front());
  // Another seed is another run.
  TrainOptions o = small_options(data, join_path(tmp, "other"));
  o.seed = 7;
  run_training(o, quiet_hooks());
  EXPECT_NE(loss_curve(o.dir), curves[0]);
}

TEST(TrainLoop, ResumeContinuesTheSameCurve) {
  std::string tmp = test::temp_dir("train_resume");
  std::string data = write_corpus(tmp, synthetic_text());
  for (Arch arch : {Arch::Gpt2, Arch::Llama}) {
    SCOPED_TRACE(arch_name(arch));
    TrainOptions full = small_options(data, join_path(tmp, std::string("full_") + arch_name(arch)));
    full.shape.arch = arch;
    full.steps = 16;
    TrainResult rf = run_training(full, quiet_hooks());

    // The same run, stopped after step 7 (as Ctrl-C does: finish the step, save, return) ...
    TrainOptions part = full;
    part.dir = join_path(tmp, std::string("part_") + arch_name(arch));
    std::atomic<bool> stop{false};
    TrainHooks h = quiet_hooks();
    h.stop = &stop;
    part.save_every = 7;
    h.on_checkpoint = [&](const std::string&, int64_t step) {
      if (step == 7) stop = true;
    };
    TrainResult r1 = run_training(part, h);
    EXPECT_TRUE(r1.interrupted);
    EXPECT_EQ(r1.step, 8);
    // ... then resumed with nothing but --resume.
    TrainOptions again;
    again.dir = part.dir;
    again.resume = true;
    again.final_eval_windows = full.final_eval_windows;  // a run-time option, not part of the checkpoint
    TrainResult r2 = run_training(again, quiet_hooks());
    EXPECT_FALSE(r2.interrupted);
    EXPECT_EQ(r2.step, 16);
    EXPECT_EQ(loss_curve(part.dir), loss_curve(full.dir));
    EXPECT_EQ(read_file(join_path(part.dir, "model.safetensors")), read_file(join_path(full.dir, "model.safetensors")));
    EXPECT_EQ(r2.summary.at("val_loss"), rf.summary.at("val_loss"));
  }
}

TEST(TrainLoop, CheckpointRoundTripsAndTokenizerGivesTheTrainersIds) {
  std::string tmp = test::temp_dir("train_ckpt");
  std::string text = synthetic_text() + "Zeal!\n";
  std::string data = write_corpus(tmp, text);
  TrainOptions o = small_options(data, join_path(tmp, "m"));
  o.shape.arch = Arch::Llama, o.shape.kv_heads = 2, o.shape.tied = false;
  o.steps = 3;
  run_training(o, quiet_hooks());
  LoadedCheckpoint ck = load_checkpoint(o.dir);
  EXPECT_EQ(ck.shape.kv_heads, 2);
  EXPECT_FALSE(ck.shape.tied);
  // Save what was loaded and load it again: the same bits.
  ParamLayout L = make_layout(ck.shape);
  CheckpointData d;
  d.shape = &ck.shape, d.layout = &L, d.params = ck.params.data(), d.vocab = ck.vocab;
  d.adam_m = ck.adam_m.data(), d.adam_v = ck.adam_v.data(), d.state = ck.state;
  std::string copy = join_path(tmp, "copy");
  save_checkpoint(copy, d);
  LoadedCheckpoint ck2 = load_checkpoint(copy);
  EXPECT_EQ(ck2.params, ck.params);
  EXPECT_EQ(ck2.adam_m, ck.adam_m);
  EXPECT_EQ(ck2.adam_v, ck.adam_v);

  // kvad's engine tokenizer, loading the saved tokenizer.json, maps the corpus to the trainer's ids.
  Corpus c = load_corpus(data, false);
  Tokenizer tok = Tokenizer::load(join_path(o.dir, "tokenizer.json"), join_path(o.dir, "tokenizer_config.json"));
  EXPECT_EQ(tok.vocab_size(), (int32_t)c.vocab.size());
  EXPECT_EQ(tok.encode(text, false, false), c.ids);
  EXPECT_EQ(tok.decode(c.ids), text);
  // Bytes the corpus never had become one space each (a run of them fused: "é" is two bytes).
  std::vector<int32_t> got = tok.encode("Z\xc3\xa9~Q", false, false);
  std::vector<int32_t> want = {c.id_of['Z'], c.id_of[' ']};
  EXPECT_EQ(got, want);
}

TEST(TrainLoop, RefusesBadInputAndLeavesNothingBehind) {
  std::string tmp = test::temp_dir("train_bad");
  std::string store = join_path(tmp, "store");
  auto expect_error = [&](TrainOptions o, const std::string& needle) {
    try {
      run_training(o, quiet_hooks());
      ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  std::string good = write_corpus(tmp, synthetic_text());
  auto file = [&](const std::string& name, const std::string& bytes) {
    std::string p = join_path(tmp, name);
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  };
  std::string dir = join_path(store, "m");
  expect_error(small_options(join_path(tmp, "missing.txt"), dir), "no such file");
  expect_error(small_options(file("empty.txt", ""), dir), "empty");
  expect_error(small_options(file("tiny.txt", "In the beginning.\n"), dir), "too short");
  expect_error(small_options(file("nul.bin", std::string("abc\0def", 7)), dir), "NUL");
  expect_error(small_options(file("latin1.txt", "caf\xe9 au lait\n"), dir), "not UTF-8");
  std::string ctrl(2000, '\x01');
  expect_error(small_options(file("ctrl.bin", ctrl), dir), "control characters");
  TrainOptions huge = small_options(good, dir);
  huge.shape.dim = 16384, huge.shape.layers = 64, huge.shape.heads = 16;
  expect_error(huge, "GB");
  TrainOptions gpt2_untied = small_options(good, dir);
  gpt2_untied.shape.tied = false;
  expect_error(gpt2_untied, "llama");
  EXPECT_FALSE(fs::exists(dir));

  // An unwritable store.
  std::string ro = join_path(tmp, "readonly");
  fs::create_directories(ro);
  chmod(ro.c_str(), 0555);
  if (access(ro.c_str(), W_OK) != 0) {  // (root can write anywhere: skip then)
    expect_error(small_options(good, join_path(ro, "m")), "cannot write");
  }
  chmod(ro.c_str(), 0755);

  // A name that exists: refused without --resume / --force; --force replaces it.
  TrainOptions o = small_options(good, dir);
  o.steps = 2;
  run_training(o, quiet_hooks());
  expect_error(o, "already exists");
  TrainOptions f = o;
  f.force = true;
  f.seed = 99;
  run_training(f, quiet_hooks());
  EXPECT_EQ(loss_curve(dir).size(), 2u);
  // --resume of a finished run without more steps, and with a changed shape.
  TrainOptions r = o;
  r.resume = true;
  expect_error(r, "already trained to step 2");
  r.steps = 4, r.shape.dim = 64, r.given = {"dim", "steps"};
  expect_error(r, "--dim 64 differs");
  // A different corpus.
  TrainOptions other = o;
  other.resume = true, other.steps = 4, other.given = {"steps"}, other.data = file("other.txt", synthetic_text() + "more\n");
  expect_error(other, "not the text");
  // No temporaries of any of this left in the store.
  for (const auto& e : fs::directory_iterator(store)) EXPECT_EQ(e.path().filename().string(), "m");
}
