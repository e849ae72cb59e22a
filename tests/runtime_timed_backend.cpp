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

  // The matrix products again, by weight shape, with the rate their weights were read at.
  const ModelConfig& c = m->config();
  auto product = [&](const std::string& shape, double* ms = nullptr, double* gbs = nullptr) -> long {
    const size_t at = table.find("%  " + shape);
    if (at == std::string::npos) return -1;
    const size_t start = table.rfind('\n', at) + 1, rate = table.find(", ", at + shape.size());
    if (gbs && rate != std::string::npos) *gbs = std::atof(table.c_str() + rate + 2);
    double t = 0;
    long n = -1;
    if (std::sscanf(table.c_str() + start, "%lf %ld", &t, &n) != 2) return -1;
    if (ms) *ms = t;
    return n;
  };
  const std::string h = "x" + std::to_string(c.hidden) + " f32";
  double head_ms = 0, head_gbs = 0;
  EXPECT_EQ(product(std::to_string(c.vocab_size) + h + ",", &head_ms, &head_gbs), 1) << table;
  EXPECT_EQ(product(std::to_string(c.q_dim() + 2 * c.kv_dim()) + h + " (3 matrices),"), layers) << table;
  EXPECT_EQ(product(std::to_string(2 * c.intermediate) + h + " (2 matrices),"), layers) << table;
  EXPECT_EQ(product(std::to_string(c.hidden) + "x" + std::to_string(c.intermediate) + " f32,"), layers) << table;
  // The head's rate is its f32 bytes over its time (both as printed, ms to 2 decimals).
  const double head_bytes = 4.0 * (double)c.vocab_size * (double)c.hidden;
  ASSERT_GT(head_ms, 0.05) << table;
  EXPECT_NEAR(head_gbs, head_bytes / (head_ms * 1e-3) / 1e9, 0.05 * head_gbs + 0.1) << table;
}
