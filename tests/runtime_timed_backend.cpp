// KVAD_PROFILE (backend/timed_backend.h): the wrapped backend gives the same logits to the bit,
// and its table counts each operation's calls as the forward made them.
#include <gtest/gtest.h>

#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "backend/timed_backend.h"
#include "runtime/devices.h"
#include "models/registry.h"
#include "runtime/loader.h"
#include "synth_tiny.h"
#include "timing_row.h"

using namespace kvad;

namespace {

// One prefill forward of 5 tokens of sequence 0, every row's logits.
std::vector<float> prefill_logits(const Model& m, Backend& ops) {
  const std::vector<int32_t> tokens = {1, 5, 9, 200, 7};
  std::vector<int32_t> blocks(4);
  std::iota(blocks.begin(), blocks.end(), 0);
  auto mem = ops.make_memory(m.memory_spec(), 4, 16);
  Batch b;
  b.add(0, tokens, 0, blocks, 16, Logits::All);
  std::vector<float> out((size_t)(b.n_logits() * m.config().vocab_size));
  m.forward(b, *mem, ops, out.data());
  return out;
}

}  // namespace

TEST(TimedBackend, SameLogitsAndACountOfEveryCall) {
  auto m = load_model_dir(test::synth_tiny("qwen2", "timed"), LoadOptions{});
  unsetenv("KVAD_PROFILE");
  const std::vector<float> plain = prefill_logits(*m, *make_backend("cpu", *m));
  setenv("KVAD_PROFILE", "1", 1);
  ASSERT_TRUE(backend_profile_requested());
  auto timed = make_backend("cpu", *m);
  unsetenv("KVAD_PROFILE");
  EXPECT_EQ(prefill_logits(*m, *timed), plain);
  testing::internal::CaptureStderr();
  timed.reset();  // the table is printed as the backend closes
  const std::string table = testing::internal::GetCapturedStderr();
  auto calls = [&](const std::string& op) { return test::timing_calls(table, op); };
  const long layers = m->config().n_layers;
  EXPECT_NE(table.find("1 batch forwards"), std::string::npos) << table;
  EXPECT_EQ(calls("attention"), layers) << table;
  EXPECT_EQ(calls("linear_group"), 2 * layers) << table;  // q/k/v, gate/up
  EXPECT_EQ(calls("embed"), 1) << table;
  EXPECT_EQ(calls("begin_forward"), 1) << table;
}
