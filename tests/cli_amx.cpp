// The AMX tiles end to end, as a user's process takes them: `kvad run` and `kvad train` with
// KVAD_AMX_EMULATE=1 go through every AMX path (CPU detection, the first-use check in a child
// process, the dispatch of prefill, the pool's threads each configuring its tiles) over the
// software model of the tiles, so a CPU without AMX checks the plumbing; the instructions
// themselves are tested where the CPU has them (tests/kernels_amx.cpp).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "core/cpu.h"
#include "core/fs.h"
#include "core/json.h"
#include "test_support.h"

using namespace kvad;

namespace {

const char* kEmulate = "env KVAD_AMX_EMULATE=1";

// The model of the tiles runs where amx_enabled() would take it: AVX-512 with BF16, and no
// KVAD_ISA asking for less than "amx" (the children inherit this process's).
bool emulation_runs_here() {
  const char* isa = std::getenv("KVAD_ISA");
  return best_isa() == Isa::Avx512 && cpu_features().avx512bf16 && (!isa || std::string(isa) == "amx");
}

}  // namespace

// q8 / q4 / K-quants are bit for bit the AVX-512 kernels' results, and bf16 weights keep f32's
// 24 bits: greedy decoding of a 61-token prompt (prefill tiles of 16 tokens and a tail) gives the
// same text. The note says the tiles were taken.
TEST(CliAmx, EmulatedTilesGiveTheSameTokensInEveryFormat) {
  if (!emulation_runs_here()) GTEST_SKIP() << "the model of the tiles runs on AVX-512 with BF16, KVAD_ISA unset or amx (" << cpu_summary() << ")";
  const std::string dir = test::temp_dir("amx-tiny-kq");
  auto synth = test::run_kvad("synth --arch qwen3 --preset tiny-kq --std 0.1 --out " + dir);
  ASSERT_EQ(synth.exit_code, 0) << synth.err;
  const std::string prompt =
      "In the beginning God created the heaven and the earth. And the earth was without form, and void; and darkness "
      "was upon the face of the deep.";
  const struct {
    const char* quant;
    const char* note;
  } formats[] = {{"q8", "q8/q4 products"}, {"q4", "q8/q4 products"}, {"q4k", "K-quant products"},
                 {"q6k", "K-quant products"}, {"bf16", "bf16 weights' products"}};
  for (const auto& f : formats) {
    const std::string args =
        "run --model " + dir + " -q " + f.quant + " --prompt '" + prompt + "' -n 12 --temperature 0 --threads 2";
    auto vector = test::run_kvad(args);
    auto tiles = test::run_kvad_under(kEmulate, args);
    ASSERT_EQ(vector.exit_code, 0) << f.quant << ": " << vector.err;
    ASSERT_EQ(tiles.exit_code, 0) << f.quant << ": " << tiles.err;
    EXPECT_NE(tiles.err.find(std::string("note: ") + f.note + " on a software model of the AMX tiles"), std::string::npos)
        << f.quant << ": the tiles were not taken: " << tiles.err;
    EXPECT_EQ(tiles.err.find("warning"), std::string::npos) << f.quant << ": " << tiles.err;
    EXPECT_NE(tiles.err.find("prompt 61 tokens"), std::string::npos) << tiles.err;
    EXPECT_EQ(tiles.out, vector.out) << f.quant;
  }
  // KVAD_ISA=avx512 is the vector-only comparison: no tiles even when asked to emulate them.
  auto lowered = test::run_kvad_under("env KVAD_AMX_EMULATE=1 KVAD_ISA=avx512",
                                      "run --model " + dir + " -q q8 --prompt '" + prompt + "' -n 2 --threads 2");
  ASSERT_EQ(lowered.exit_code, 0) << lowered.err;
  EXPECT_EQ(lowered.err.find("AMX"), std::string::npos) << lowered.err;
}

// `kvad train --precision bf16` on the tiles: the same run's loss to f32 rounding (the sums'
// order differs from vdpbf16ps's), and the note.
TEST(CliAmx, EmulatedTilesTrainBf16) {
  if (!emulation_runs_here()) GTEST_SKIP() << "the model of the tiles runs on AVX-512 with BF16, KVAD_ISA unset or amx (" << cpu_summary() << ")";
  const std::string home = test::temp_dir("amx-train");
  const std::string data = join_path(home, "corpus.txt");
  {
    std::ofstream f(data);
    for (int i = 0; i < 400; i++) f << "in the beginning god created the heaven and the earth " << i % 7 << ".\n";
  }
  auto final_loss = [&](const std::string& launcher, const std::string& name, std::string* err) {
    auto r = test::run_kvad_under(launcher, "train --data '" + data + "' --name " + name +
                                                " --layers 2 --dim 32 --heads 4 --context 32 --batch 4 --eval-windows 4"
                                                " --final-eval-windows 16 --steps 12 --eval-every 0 --sample-chars 0"
                                                " --precision bf16");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    *err = r.err;
    const size_t brace = r.out.rfind("\n{");
    const Json summary = parse_json(r.out.substr(brace == std::string::npos ? 0 : brace + 1), "kvad train's summary");
    return summary["final_train_loss"].get<double>();
  };
  std::string vector_err, tiles_err;
  const double vector = final_loss("env KVAD_HOME=" + home, "vector", &vector_err);
  const double tiles = final_loss(std::string(kEmulate) + " KVAD_HOME=" + home, "tiles", &tiles_err);
  EXPECT_NE(tiles_err.find("note: training bf16 products on a software model of the AMX tiles"), std::string::npos)
      << tiles_err;
  EXPECT_NEAR(tiles, vector, 1e-4 * vector);
}
