// The batch-first seam: one forward over rows of many sequences, each at its own position, gives
// every sequence the logits it gets alone -- for each architecture, with blocks of 3 positions
// (shuffled across one pool) so every block-boundary case is exercised, and mixing prefill chunks
// of some sequences with single decode rows of others in the same batch. A recurrent model
// (Qwen3-Next) gives each sequence its own state slot.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "models/registry.h"
#include "models/synth.h"
#include "one_sequence.h"
#include "synth_tiny.h"
#include "test_support.h"

using namespace kvad;

namespace {

double max_rel_diff(const float* a, const float* b, int64_t n) {
  double scale = 0, d = 0;
  for (int64_t i = 0; i < n; i++) scale = std::max(scale, (double)std::fabs(b[i]));
  for (int64_t i = 0; i < n; i++) d = std::max(d, (double)std::fabs(a[i] - b[i]));
  return d / std::max(scale, 1e-30);
}

}  // namespace

TEST(ModelBatch, EverySequenceGetsTheLogitsItGetsAlone) {
  const int64_t bs = 3;
  for (std::string arch : {"llama", "qwen2", "qwen3", "gpt2", "qwen3_moe", "qwen3_next"}) {
    SCOPED_TRACE(arch);
    auto m = load_model_dir(test::synth_tiny(arch, "batch", "tiny-v512"), {});
    const int64_t V = m->config().vocab_size;
    // K sequences: {tokens already held, new rows in the batched step}.
    const int64_t shape[][2] = {{0, 7}, {5, 1}, {11, 4}, {3, 1}, {0, 1}, {8, 9}, {17, 1}, {2, 2}};
    const int K = sizeof shape / sizeof shape[0];
    std::mt19937 rng(11);
    std::vector<std::vector<int32_t>> toks(K);
    for (int i = 0; i < K; i++)
      for (int64_t t = 0; t < shape[i][0] + shape[i][1]; t++) toks[i].push_back((int32_t)(rng() % (uint32_t)V));

    // Alone: each sequence's held part, then its new rows (all logits).
    std::vector<std::vector<float>> alone(K);
    for (int i = 0; i < K; i++) {
      test::OneSequence s(*m, bs, 64);
      std::vector<float> scratch((size_t)V);
      if (shape[i][0] > 0) s.forward(toks[i].data(), shape[i][0], scratch.data());
      alone[i].resize((size_t)(shape[i][1] * V));
      s.forward(toks[i].data() + shape[i][0], shape[i][1], alone[i].data(), true);
    }

    // Together: one pool, each sequence its own shuffled blocks; the held parts in one batch
    // (no logits), then every sequence's new rows in one batch.
    auto ops = make_cpu_backend();
    int64_t per_seq = 64 / bs + 1, n_blocks = per_seq * K;
    // Recurrent: slot i is sequence i's state, slot K + i a copy to rerun the same rows from.
    const bool recurrent = !m->memory_spec().rewindable();
    auto mem = ops->make_memory(m->memory_spec(), n_blocks, bs, recurrent ? 2 * K : 0);
    for (int i = 0; recurrent && i < K; i++) mem->clear_state(i);
    std::vector<int32_t> perm((size_t)n_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(5));
    auto table = [&](int i) { return std::span<const int32_t>(perm.data() + i * per_seq, (size_t)per_seq); };
    Batch held;
    for (int i = 0; i < K; i++)
      if (shape[i][0] > 0) {
        held.add(i, std::span<const int32_t>(toks[i].data(), (size_t)shape[i][0]), 0, table(i), bs, Logits::None);
        held.set_state(i);
      }
    m->forward(held, *mem, *ops, nullptr);
    for (int i = 0; recurrent && i < K; i++) mem->copy_state(i, K + i);
    Batch step;
    for (int i = 0; i < K; i++) {
      step.add(i, std::span<const int32_t>(toks[i].data() + shape[i][0], (size_t)shape[i][1]), shape[i][0], table(i), bs,
               Logits::All);
      step.set_state(i);
    }
    std::vector<float> got((size_t)(step.n_logits() * V));
    m->forward(step, *mem, *ops, got.data());
    int64_t row = 0;
    for (int i = 0; i < K; i++)
      for (int64_t t = 0; t < shape[i][1]; t++, row++)
        EXPECT_LE(max_rel_diff(&got[(size_t)(row * V)], &alone[i][(size_t)(t * V)], V), 1e-5)
            << "sequence " << i << " row " << t;
    // Logits only for the rows that want them, in row order.
    Batch last;
    for (int i = 0; i < K; i++) {
      last.add(i, std::span<const int32_t>(toks[i].data() + shape[i][0], (size_t)shape[i][1]), shape[i][0], table(i), bs,
               Logits::Last);
      last.set_state(i);
      if (recurrent) mem->copy_state(K + i, i);  // the same rows again, from the same state
    }
    EXPECT_EQ(last.n_logits(), K);
    std::vector<float> lastl((size_t)(K * V));
    m->forward(last, *mem, *ops, lastl.data());
    for (int i = 0; i < K; i++)
      EXPECT_LE(max_rel_diff(&lastl[(size_t)(i * V)], &alone[i][(size_t)((shape[i][1] - 1) * V)], V), 1e-5) << i;
  }
}

TEST(ModelBatch, APositionPastTheContextIsRefused) {
  SynthOptions o;
  o.arch = "gpt2";
  o.preset = "tiny";
  o.out = test::temp_dir("batch-ctx");
  synthesize(o);
  auto m = load_model_dir(o.out, {});
  auto ops = make_cpu_backend();
  int64_t ctx = m->context_length();
  auto mem = ops->make_memory(m->memory_spec(), ctx / 16 + 2, 16);
  std::vector<int32_t> blocks((size_t)(ctx / 16 + 2));
  std::iota(blocks.begin(), blocks.end(), 0);
  Batch b;
  int32_t tok = 1;
  b.add(0, std::span<const int32_t>(&tok, 1), ctx, blocks, 16, Logits::Last);
  std::vector<float> l((size_t)m->config().vocab_size);
  EXPECT_THROW(m->forward(b, *mem, *ops, l.data()), Error);
}
