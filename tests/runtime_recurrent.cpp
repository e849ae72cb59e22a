// A model whose layers keep a recurrent state (the tiny Qwen3-Next) through the engine: the state
// cannot rewind, so truncation lands on the last snapshot at or before the wanted position (or at
// 0), says where it landed, and forwarding from there gives what a fresh prefill gives; prefix
// reuse across requests resumes from snapshots; batched sequences and forked choices each keep
// their own state.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "core/error.h"
#include "models/synth.h"
#include "runtime/engine.h"
#include "runtime/generate.h"
#include "runtime/loader.h"
#include "runtime/speculative.h"
#include "test_support.h"
#include "greedy.h"

using namespace kvad;
using test::greedy;

namespace {

const LoadedModel& tiny_next() {
  static LoadedModel m = [] {
    SynthOptions o;
    o.arch = "qwen3_next";
    o.preset = "tiny";
    o.std = 0.1;
    o.norm_jitter = 0.1;
    o.dtype = DType::F32;
    o.out = test::temp_dir("tiny-qwen3-next");
    synthesize(o);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      std::filesystem::copy_file(test::source_path(std::string("tests/fixtures/tokenizers/qwen3/") + f), o.out + "/" + f);
    return load_model(o.out, {});
  }();
  return m;
}

std::vector<int32_t> random_tokens(uint32_t seed, int n) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p;
  for (int i = 0; i < n; i++) p.push_back((int32_t)(rng() % 5000) + 10);
  return p;
}

EngineOptions options(int64_t snapshot_every, int64_t snapshots = -1, int64_t max_running = 1) {
  EngineOptions o;
  o.block_size = 16;
  o.ctx = 512;
  o.snapshot_every = snapshot_every;
  o.snapshots = snapshots;
  o.max_running = max_running;
  return o;
}

std::vector<int32_t> span(const std::vector<int32_t>& t, size_t from, size_t to) {
  return std::vector<int32_t>(t.begin() + (ptrdiff_t)from, t.begin() + (ptrdiff_t)to);
}

// The last logits of a fresh session over tokens.
std::vector<float> fresh(const std::vector<int32_t>& tokens) {
  EngineOptions o = options(0);
  o.ctx = 2048;
  Engine e(*tiny_next().model, o);
  return e.open_session()->forward(tokens);
}

void expect_close(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  double scale = 0, worst = 0;
  for (size_t i = 0; i < a.size(); i++) scale = std::max(scale, (double)std::fabs(b[i]));
  for (size_t i = 0; i < a.size(); i++) worst = std::max(worst, (double)std::fabs(a[i] - b[i]));
  EXPECT_LE(worst, 1e-5 * scale) << what;
}


}  // namespace

TEST(Recurrent, TruncateLandsOnTheLastSnapshotAndResumesLikeAFreshPrefill) {
  const std::vector<int32_t> t = random_tokens(1, 60);
  Engine e(*tiny_next().model, options(16));
  auto s = e.open_session();
  s->forward(span(t, 0, 50));
  EXPECT_EQ(s->truncate(50), 50);  // nothing to undo: the state stays
  EXPECT_EQ(s->truncate(47), 32);  // the snapshot at 48 is past 47; 32 is the last one before
  EXPECT_EQ(s->cached(), 32);
  EXPECT_EQ(s->tokens(), span(t, 0, 32));
  expect_close(s->forward(span(t, 32, 60)), fresh(t), "resumed from the snapshot at 32");
  EXPECT_EQ(s->truncate(48), 48);  // exactly on a block end that kept its snapshot
  expect_close(s->forward(span(t, 48, 60)), fresh(t), "resumed from the snapshot at 48");
  EXPECT_EQ(s->truncate(15), 0);  // before the first snapshot: from nothing
  expect_close(s->forward(span(t, 0, 60)), fresh(t), "after landing at 0");
}

TEST(Recurrent, WithoutSnapshotsTruncateLandsAtZero) {
  const std::vector<int32_t> t = random_tokens(2, 40);
  Engine e(*tiny_next().model, options(0));
  auto s = e.open_session();
  s->forward(t);
  EXPECT_EQ(s->truncate(39), 0);
  EXPECT_EQ(s->cached(), 0);
  expect_close(s->forward(t), fresh(t), "after landing at 0");
  EXPECT_EQ(e.stats().blocks.snapshots_held, 0);
}

TEST(Recurrent, SnapshotsEveryNBlocksAndTheLatestAreKeptWhenSlotsRunShort) {
  const std::vector<int32_t> t = random_tokens(3, 100);
  // Every 2 blocks (32 positions): snapshots at 32, 64, 96.
  {
    Engine e(*tiny_next().model, options(32));
    auto s = e.open_session();
    s->forward(t);
    EXPECT_EQ(e.stats().blocks.snapshots_held, 3);
    EXPECT_EQ(s->truncate(63), 32);
  }
  // One slot: a long sequence keeps its latest snapshot (96), not its first.
  Engine e(*tiny_next().model, options(16, 1));
  auto s = e.open_session();
  s->forward(t);
  EXPECT_EQ(e.stats().blocks.snapshots_held, 1);
  EXPECT_EQ(s->truncate(90), 0);
  s->forward(t);
  EXPECT_EQ(s->truncate(99), 96);
  expect_close(s->forward(span(t, 96, 100)), fresh(t), "from the one kept snapshot");
}

TEST(Recurrent, FewSlotsAreThinnedSoDeepAndShallowRewindsBothLandPartWay) {
  const std::vector<int32_t> t = random_tokens(11, 1600);  // 100 blocks, a snapshot offered at each end
  EngineOptions o = options(16, 8);
  o.ctx = 2048;
  Engine e(*tiny_next().model, o);
  auto s = e.open_session();
  s->forward(t);
  EXPECT_EQ(e.stats().blocks.snapshots_held, 8);
  // Thinned with distance from the end (kept: 0, 1, 2, 4, 8, 12, 20 and 36 blocks back), so a rewind
  // 500 positions deep still lands part way, and one of a few positions loses at most a block.
  const int64_t deep = s->truncate(1100);
  EXPECT_GT(deep, 1100 - 16 * 20);
  EXPECT_LE(deep, 1100);
  expect_close(s->forward(span(t, (size_t)deep, 1600)), fresh(t), "resumed from a thinned snapshot");
  EXPECT_EQ(s->truncate(1599), 1584);
}

TEST(Recurrent, SessionPrefixReuseResumesFromASnapshot) {
  const LoadedModel& m = tiny_next();
  std::vector<int32_t> a = random_tokens(4, 45), b = span(a, 0, 37);
  for (int32_t x : random_tokens(5, 9)) b.push_back(x);
  Engine e(*m.model, options(16));
  auto s = e.open_session();
  generate(*s, *m.tokenizer, a, greedy(3), [](const TokenEvent&) { return true; });
  GenerateResult reused = generate(*s, *m.tokenizer, b, greedy(6), [](const TokenEvent&) { return true; });
  EXPECT_EQ(reused.cached_tokens, 32);  // the common prefix is 37: the last snapshot before it is at 32
  Engine cold(*m.model, options(16));
  auto c = cold.open_session();
  GenerateResult expect = generate(*c, *m.tokenizer, b, greedy(6), [](const TokenEvent&) { return true; });
  EXPECT_EQ(expect.cached_tokens, 0);
  EXPECT_EQ(reused.tokens, expect.tokens);
}

namespace {

struct RecurrentOutcome {
  GenerateResult result;
  std::string error;
};

GenerationRequest request(const std::vector<int32_t>& prompt, const GenerateOptions& g, std::vector<RecurrentOutcome>& out) {
  GenerationRequest r;
  r.prompt = prompt;
  r.opts = g;
  r.tokenizer = tiny_next().tokenizer.get();
  r.on_token = [](const TokenEvent&) { return true; };
  r.on_done = [&out](GenerateResult&& res, const std::string& err) { out.push_back({std::move(res), err}); };
  return r;
}

void drain(Engine& e) {
  for (int i = 0; i < 100000 && e.has_work(); i++) e.step();
  ASSERT_FALSE(e.has_work());
}

}  // namespace

TEST(Recurrent, RequestsReuseEachOthersSnapshotsAndBatchWithTheirOwnStates) {
  const LoadedModel& m = tiny_next();
  Engine e(*m.model, options(16, -1, 4));
  std::vector<int32_t> first = random_tokens(6, 70), second = span(first, 0, 52);
  for (int32_t x : random_tokens(7, 5)) second.push_back(x);
  std::vector<RecurrentOutcome> a, b, others;
  e.submit(request(first, greedy(4), a));
  drain(e);
  // The second request shares 52 tokens: it starts from the snapshot at 48, beside three others.
  e.submit(request(second, greedy(8), b));
  for (int i = 0; i < 3; i++) e.submit(request(random_tokens(10 + i, 20 + 7 * i), greedy(8), others));
  drain(e);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].error, "");
  EXPECT_EQ(b[0].result.cached_tokens, 48);
  Engine cold(*m.model, options(16));
  auto s = cold.open_session();
  EXPECT_EQ(b[0].result.tokens,
            generate(*s, *m.tokenizer, second, greedy(8), [](const TokenEvent&) { return true; }).tokens);
  EXPECT_EQ(e.stats().blocks.states_used, 0);  // every working slot went back
}

TEST(Recurrent, ForkedChoicesEachContinueTheirOwnCopyOfTheState) {
  const LoadedModel& m = tiny_next();
  Engine e(*m.model, options(16, -1, 3));
  std::vector<RecurrentOutcome> out;
  GenerationRequest r = request(random_tokens(8, 30), greedy(10), out);
  r.n = 3;
  e.submit(std::move(r));
  drain(e);
  ASSERT_EQ(out.size(), 3u);
  Engine alone(*m.model, options(16));
  auto a = alone.open_session();
  std::vector<int32_t> expect =
      generate(*a, *m.tokenizer, random_tokens(8, 30), greedy(10), [](const TokenEvent&) { return true; }).tokens;
  for (const RecurrentOutcome& o : out) EXPECT_EQ(o.result.tokens, expect);  // greedy: every choice the same tokens
}

TEST(Recurrent, SpeculativeDecodingIsRefusedWithAReason) {
  Engine e(*tiny_next().model, options(16));
  std::vector<RecurrentOutcome> out;
  GenerationRequest r = request(random_tokens(9, 10), greedy(4), out);
  r.opts.speculative.source = make_lookup_draft();
  try {
    e.submit(std::move(r));
    FAIL() << "a recurrent model accepted speculative decoding";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("recurrent state"), std::string::npos) << err.what();
  }
}

TEST(Recurrent, TheCacheAccountCountsOnlyTheAttentionLayers) {
  const Model& m = *tiny_next().model;
  MemorySpec spec = m.memory_spec();
  // 4 layers, every second one full attention (2 KV heads x 32 values): only those store per position.
  EXPECT_EQ(spec.bytes_per_token(), (size_t)(2 * 2 * 2 * 32 * 4));
  EXPECT_EQ(spec.describe_per_token(),
            "2 recurrent layers: none (a fixed state per sequence); 2 attention layers x 2 KV heads x K,V x 32 values (128 B)");
  // Per DeltaNet layer: the conv window (3 x (2 x 2 x 16 + 4 x 16)) and S (4 heads x 16 x 16), f32.
  EXPECT_EQ(spec.state_bytes(), (size_t)(2 * (3 * 128 + 4 * 16 * 16) * 4));
  Engine e(m, options(16));
  EXPECT_EQ(e.stats().state_bytes, spec.state_bytes());
  EXPECT_EQ(e.stats().snapshot_every, 16);
}
