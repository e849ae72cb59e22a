// Data-parallel training under mpirun (docs/scale-out.md): `mpirun -np 2 kvad train` against the
// single process with the same global batch, full training and LoRA, resumed, and what is refused.
// Runs the release binary through OpenMPI's mpirun on one machine (shared-memory transport), so it
// is in the release pass (KVAD_RELEASE_PASS_TESTS): OpenMPI under ASan reports its own leaks.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "core/fs.h"
#include "core/json.h"
#include "core/rng.h"
#include "io/safetensors.h"
#include "test_support.h"

using namespace kvad;

namespace {

bool have_mpirun() { return std::system("command -v mpirun >/dev/null 2>&1") == 0; }

// Two ranks on this machine over shared memory (self,vader), allowed as root (CI's containers run
// as root), more ranks than cores allowed.
const char* kMpirun2 = "mpirun -np 2 --oversubscribe --mca btl self,vader";
void allow_root() {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
}
// `timeout` turns a hang into a failure (exit 124).
test::RunResult mpirun2(const std::string& args) {
  allow_root();
  return test::run_kvad_under(fmt::format("timeout 120 {}", kMpirun2), args);
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) n++;
  return n;
}

// How far apart the same f32 tensors of two .safetensors files are: the largest |a - b| and the
// root mean square of a - b over every value.
struct Gap {
  double max_diff = 0, rms = 0;
  int64_t values = 0, differ = 0;
};
Gap compare(const std::string& a_path, const std::string& b_path) {
  SafetensorsFile a(a_path), b(b_path);
  Gap g;
  EXPECT_EQ(a.tensors().size(), b.tensors().size());
  for (const TensorView& ta : a.tensors()) {
    const TensorView* tb = nullptr;
    for (const TensorView& t : b.tensors())
      if (t.name == ta.name) tb = &t;
    if (!tb || tb->shape != ta.shape || ta.dtype != DType::F32) {
      ADD_FAILURE() << ta.name << ": not the same f32 tensor in " << b_path;
      continue;
    }
    const float* x = (const float*)ta.data;
    const float* y = (const float*)tb->data;
    for (int64_t i = 0; i < ta.numel(); i++) {
      const double d = (double)x[i] - (double)y[i];
      g.max_diff = std::max(g.max_diff, std::fabs(d));
      g.rms += d * d;
      g.differ += x[i] != y[i];
      g.values++;
    }
  }
  g.rms = std::sqrt(g.rms / (double)std::max<int64_t>(1, g.values));
  return g;
}

// A text of short numbered lines (a 28-character vocabulary).
std::string write_corpus(const std::string& dir) {
  const char* words[] = {"seven", "rivers", "run", "under", "a", "grey", "bridge", "quietly", "north"};
  Rng r(21);
  std::string s;
  for (int line = 0; s.size() < 12000; line++) {
    s += std::to_string(line % 10) + ":";
    for (int i = 0, n = 3 + (int)r.below(6); i < n; i++) s += std::string(" ") + words[r.below(9)];
    s += "\n";
  }
  std::string p = join_path(dir, "corpus.txt");
  std::ofstream(p, std::ios::binary) << s;
  return p;
}

// One process and two ranks sum each weight gradient over the batch's rows in a different order
// (one product over all rows, or two halves then their sum), so their gradients differ in the last
// bits and their weights are not bit-identical: they are equal within float tolerance. Bounds, from
// 30 runs of these two set-ups (5 seeds x the avx512, avx2 and scalar kernels; docs/scale-out.md):
//   every step's training loss and each validation loss within 1e-5 relative (largest seen 1.8e-6;
//   a rank scoring the wrong rows or dividing by the wrong count misses by 1e-2 and more);
//   every weight within 0.05 x lr x steps (largest seen 0.023: AdamW divides each gradient by its
//   own running size, so one whose true value is near 0 moves by up to lr on rounding alone; a
//   wrong gradient moves most weights by that much).
void expect_same_training(const std::string& one, const std::string& two, const std::string& weights, double lr) {
  Json s1 = read_json_file(join_path(one, "trainer_state.json")), s2 = read_json_file(join_path(two, "trainer_state.json"));
  ASSERT_EQ(s1["losses"].size(), s2["losses"].size());
  ASSERT_EQ(s1["val"].size(), s2["val"].size());
  double worst = 0;
  for (size_t i = 0; i < s1["losses"].size(); i++) {
    const double a = s1["losses"][i].get<double>(), b = s2["losses"][i].get<double>();
    worst = std::max(worst, std::fabs(a - b) / std::fabs(a));
    EXPECT_NEAR(b, a, 1e-5 * std::fabs(a)) << "training loss of step " << i + 1;
  }
  for (size_t i = 0; i < s1["val"].size(); i++) {
    const double a = s1["val"][i][1].get<double>(), b = s2["val"][i][1].get<double>();
    worst = std::max(worst, std::fabs(a - b) / std::fabs(a));
    EXPECT_NEAR(b, a, 1e-5 * std::fabs(a)) << "validation loss at step " << s1["val"][i][0];
  }
  const int64_t steps = s1["step"].get<int64_t>();
  Gap g = compare(join_path(one, weights), join_path(two, weights));
  std::printf("%s after %lld steps: %lld of %lld weights differ, max |diff| %.3e (%.1e x lr x steps), rms %.3e; "
              "losses within %.1e relative\n",
              weights.c_str(), (long long)steps, (long long)g.differ, (long long)g.values, g.max_diff,
              g.max_diff / (lr * (double)steps), g.rms, worst);
  EXPECT_GT(g.values, 0);
  EXPECT_LE(g.max_diff, 0.05 * lr * (double)steps) << weights;
}

}  // namespace

// Full training: two ranks with batch 8 end at the weights one process with batch 8 reaches; only
// rank 0 prints and saves; the ranks' weights are checked equal at every checkpoint; --resume under
// mpirun continues the same run.
TEST(TrainMpi, TwoRanksEqualOneProcess) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun is not installed (openmpi-bin)";
  std::string home = test::temp_dir("home_mpi");
  setenv("KVAD_HOME", home.c_str(), 1);
  std::string data = write_corpus(home);
  const std::string args = fmt::format(
      "train --data '{}' --layers 2 --dim 32 --heads 4 --context 32 --batch 8 --steps 6 --eval-every 3 "
      "--eval-windows 6 --final-eval-windows 12 --save-every 2 --sample-chars 0 --lr 3e-3",
      data);
  auto one = test::run_kvad(args + " --name one --threads 1");
  ASSERT_EQ(one.exit_code, 0) << one.err << one.out;
  auto two = mpirun2(args + fmt::format(" --name two --json-out '{}/two.json'", home));
  ASSERT_EQ(two.exit_code, 0) << two.err << two.out;
  // Rank 0 alone prints: one start line, one summary, a save line per checkpoint.
  EXPECT_EQ(count(two.out, "training gpt2"), 1u) << two.out;
  EXPECT_NE(two.out.find("2 ranks x "), std::string::npos) << two.out;
  EXPECT_EQ(count(two.out, "(the same weights on all 2 ranks)"), 3u) << two.out;  // steps 2, 4, 6
  Json j2 = read_json_file(join_path(home, "two.json"));
  EXPECT_EQ(j2["ranks"], 2);
  EXPECT_GE(j2["allreduce_ms_median"].get<double>(), 0.0);

  const std::string d1 = join_path(join_path(home, "models"), "one"), d2 = join_path(join_path(home, "models"), "two");
  expect_same_training(d1, d2, "model.safetensors", 3e-3);

  // Resumed under mpirun (every rank reads the checkpoint), against the single process resumed.
  one = test::run_kvad("train --name one --resume --steps 8 --threads 1");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  two = mpirun2("train --name two --resume --steps 8");
  ASSERT_EQ(two.exit_code, 0) << two.err << two.out;
  EXPECT_EQ(count(two.out, "resuming gpt2"), 1u) << two.out;
  EXPECT_EQ(read_json_file(join_path(d2, "trainer_state.json"))["step"], 8);
  expect_same_training(d1, d2, "model.safetensors", 3e-3);  // the optimiser's state was saved and read back
  unsetenv("KVAD_HOME");
}

// LoRA on chat JSONL, where the rows of a batch score different numbers of targets (only the
// assistant's replies, of different lengths): each rank's loss is divided by the whole batch's
// count, so the adapter equals the one-process adapter. A rank dividing by its own count would miss
// by the ratio of the two (tens of percent of every gradient), far past the bound.
TEST(TrainMpi, LoraChatTwoRanksEqualOneProcess) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun is not installed (openmpi-bin)";
  std::string home = test::temp_dir("home_mpi_lora");
  setenv("KVAD_HOME", home.c_str(), 1);
  std::string base = join_path(home, "q3");
  auto s = test::run_kvad(fmt::format("synth --arch qwen3 --preset tiny --out '{}' --dtype f32 --seed 5", base));
  ASSERT_EQ(s.exit_code, 0) << s.err;
  std::string data = join_path(home, "chat.jsonl");
  const char* things[] = {"a lamp", "the old green door", "salt", "a very long and winding road to the sea", "rain"};
  test::write_chat_jsonl(data, 30, [&](int i) {
    return std::pair(fmt::format("Name thing {}.", i), fmt::format("Thing {} is {}.", i, things[(i * 7) % 5]));
  });
  const std::string args = fmt::format(
      "train --lora --base '{}' --data '{}' --rank 4 --batch 4 --steps 4 --lr 2e-2 --eval-every 2 --save-every 2",
      base, data);
  auto one = test::run_kvad(args + " --name one --threads 1");
  ASSERT_EQ(one.exit_code, 0) << one.err << one.out;
  auto two = mpirun2(args + " --name two");
  ASSERT_EQ(two.exit_code, 0) << two.err << two.out;
  EXPECT_EQ(count(two.out, "step 0 (the base)"), 1u) << two.out;
  const std::string d1 = join_path(join_path(home, "adapters"), "one"), d2 = join_path(join_path(home, "adapters"), "two");
  // The base scored by one process, and by two ranks a half of each batch each: the same figure but
  // for the order of the double sums.
  const double b1 = read_json_file(join_path(d1, "trainer_state.json"))["base_val"]["loss"].get<double>(),
               b2 = read_json_file(join_path(d2, "trainer_state.json"))["base_val"]["loss"].get<double>();
  EXPECT_NEAR(b2, b1, 1e-12 * b1);
  expect_same_training(d1, d2, "adapter_model.safetensors", 2e-2);
  unsetenv("KVAD_HOME");
}

// Refused before any work, with the reason: a batch the ranks cannot share equally; ranks that read
// different texts. And an error on one rank only (rank 0 alone writes, so only it checks
// --json-out's folder) ends the whole job, named by its rank, instead of leaving rank 1 waiting in
// an allreduce.
TEST(TrainMpi, Refusals) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun is not installed (openmpi-bin)";
  std::string home = test::temp_dir("home_mpi_bad");
  setenv("KVAD_HOME", home.c_str(), 1);
  std::string data = write_corpus(home);
  const std::string small = "--layers 1 --dim 16 --heads 2 --context 16 --steps 2 --sample-chars 0";
  auto r = mpirun2(fmt::format("train --data '{}' --name odd {} --batch 3", data, small));
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.exit_code, 124) << "timed out: " << r.err;
  EXPECT_NE(r.err.find("--batch 3 cannot be shared by the 2 ranks of mpirun -np 2"), std::string::npos) << r.err;
  r = mpirun2(fmt::format("train --data '{}' --name nowhere {} --batch 4 --json-out '{}/no/such/dir/x.json'", data,
                          small, home));
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.exit_code, 124) << "timed out: " << r.err;
  EXPECT_NE(r.err.find("--json-out"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(rank 0 of 2)"), std::string::npos) << r.err;
  // Each host reads its own --data: rank 1 given another text than rank 0 is found out at the start.
  const std::string other = join_path(home, "other.txt"), launch = join_path(home, "per_rank.sh");
  std::ofstream(other) << read_file(data).substr(0, 8000);
  std::ofstream(launch) << fmt::format("#!/bin/sh\n[ \"$OMPI_COMM_WORLD_RANK\" = 1 ] && d='{}' || d='{}'\nexec \"$@\" --data \"$d\"\n",
                                       other, data);
  ASSERT_EQ(chmod(launch.c_str(), 0755), 0);
  r = test::run_kvad_under(fmt::format("timeout 120 {} '{}'", kMpirun2, launch),
                           fmt::format("train --name apart {} --batch 4", small));
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.exit_code, 124) << "timed out: " << r.err;
  EXPECT_NE(r.err.find("the ranks read different texts"), std::string::npos) << r.err;
  unsetenv("KVAD_HOME");
}

// Ctrl-C reaches mpirun, which ends the ranks unsaved; mpirun forwards SIGUSR1 to every rank, and
// kvad train takes it as Ctrl-C: all ranks stop at the same step and rank 0 saves it.
TEST(TrainMpi, SigusrToMpirunStopsWithACheckpoint) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun is not installed (openmpi-bin)";
  std::string home = test::temp_dir("home_mpi_usr1");
  setenv("KVAD_HOME", home.c_str(), 1);
  allow_root();
  const std::string data = write_corpus(home), out = join_path(home, "output");
  std::ofstream(out) << "";
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1), dup2(fd, 2);
    const std::string cmd = fmt::format("exec {} '{}' train --data '{}' --name usr1 --layers 1 --dim 16 --heads 2 "
                                        "--context 16 --batch 4 --steps 1000000 --eval-every 0 --sample-chars 0",
                                        kMpirun2, KVAD_BINARY, data);
    execl("/bin/sh", "sh", "-c", cmd.c_str(), (char*)nullptr);
    _exit(127);
  }
  auto output = [&] { return read_file(out); };
  for (int i = 0; i < 600 && output().find("training gpt2") == std::string::npos; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kill(pid, SIGUSR1);
  int status = 0;
  for (int i = 0; i < 600 && waitpid(pid, &status, WNOHANG) == 0; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (waitpid(pid, &status, WNOHANG) == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    FAIL() << "mpirun did not end within 60 s of SIGUSR1:\n" << output();
  }
  ASSERT_TRUE(WIFEXITED(status)) << output();
  EXPECT_EQ(WEXITSTATUS(status), 130) << output();
  const int64_t step = read_json_file(join_path(join_path(join_path(home, "models"), "usr1"), "trainer_state.json"))["step"];
  EXPECT_GE(step, 1);
  EXPECT_NE(output().find(fmt::format("saved {} at step {} (the same weights on all 2 ranks)",
                                      join_path(join_path(home, "models"), "usr1"), step)),
            std::string::npos)
      << output();
  EXPECT_NE(output().find(fmt::format("interrupted: saved step {}", step)), std::string::npos) << output();
  unsetenv("KVAD_HOME");
}
