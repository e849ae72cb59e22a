// The engine's step loop (continuous batching) over a tiny synthesized Qwen2: batched output is
// the output alone, preemption recomputes without corrupting anyone, prefix blocks are shared
// across requests, chunked prefill keeps decodes streaming, and the pool always drains.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "core/error.h"
#include "models/synth.h"
#include "runtime/engine.h"
#include "runtime/loader.h"
#include "runtime/score.h"
#include "test_support.h"
#include "tiny_qwen2.h"

using namespace kvad;

namespace {

const LoadedModel& tiny() { return test::tiny_qwen2(); }

std::vector<int32_t> random_prompt(std::mt19937& rng, int n) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; i++) p.push_back((int32_t)(rng() % 5000) + 10);
  return p;
}

GenerateOptions opts(int max_tokens, float temperature = 0, uint64_t seed = 0) {
  GenerateOptions g;
  g.sampling.temperature = temperature;
  g.sampling.seed = seed;
  g.max_tokens = max_tokens;
  return g;
}

std::vector<int32_t> alone(const std::vector<int32_t>& prompt, const GenerateOptions& g) {
  Engine e(*tiny().model, EngineOptions{});
  auto s = e.open_session();
  return generate(*s, *tiny().tokenizer, prompt, g, [](const TokenEvent&) { return true; }).tokens;
}

struct EngineOutcome {
  GenerateResult result;
  std::string error;
  bool done = false;
};

GenerationRequest request(const std::vector<int32_t>& prompt, const GenerateOptions& g, EngineOutcome& out) {
  GenerationRequest r;
  r.prompt = prompt;
  r.opts = g;
  r.tokenizer = tiny().tokenizer.get();
  r.on_token = [](const TokenEvent&) { return true; };
  r.on_done = [&out](GenerateResult&& res, const std::string& err) {
    out.result = std::move(res);
    out.error = err;
    out.done = true;
  };
  return r;
}

void drain(Engine& e) {
  for (int i = 0; i < 100000 && e.has_work(); i++) e.step();
  ASSERT_FALSE(e.has_work());
}

}  // namespace

TEST(Engine, GreedyOutputIsTheSameAloneAndBatchedWithFifteenOthers) {
  std::mt19937 rng(1);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 16; i++) prompts.push_back(random_prompt(rng, 3 + (int)(rng() % 60)));
  EngineOptions eo;
  eo.max_running = 16;
  eo.step_tokens = 48;  // long prompts prefill in chunks beside the decodes
  eo.block_size = 4;
  Engine e(*tiny().model, eo);
  std::vector<EngineOutcome> out(16);
  for (int i = 0; i < 16; i++) e.submit(request(prompts[(size_t)i], opts(20), out[(size_t)i]));
  drain(e);
  for (int i = 0; i < 16; i++) {
    ASSERT_TRUE(out[(size_t)i].done);
    EXPECT_EQ(out[(size_t)i].result.tokens, alone(prompts[(size_t)i], opts(20))) << "sequence " << i;
    EXPECT_EQ(out[(size_t)i].result.finish_reason, "length");
  }
  EngineStats st = e.stats();
  EXPECT_EQ(st.blocks.used, 0);  // every block back in the pool
  EXPECT_GT(st.steps, 0u);
}

TEST(Engine, SameSeedSameTextWhateverElseIsInTheBatch) {
  std::mt19937 rng(2);
  std::vector<int32_t> p = random_prompt(rng, 12);
  std::vector<int32_t> want = alone(p, opts(16, 0.9f, 77));
  EngineOptions eo;
  eo.max_running = 6;
  Engine e(*tiny().model, eo);
  std::vector<EngineOutcome> out(6);
  for (int i = 0; i < 6; i++)
    e.submit(request(i == 3 ? p : random_prompt(rng, 5 + i), opts(16, 0.9f, i == 3 ? 77 : (uint64_t)i), out[(size_t)i]));
  drain(e);
  EXPECT_EQ(out[3].result.tokens, want);
}

// n choices of one prompt: the prompt is computed once and its blocks are shared by all n; choice
// i is the text the same request alone gives with seed + i, and each choice ends on its own.
TEST(Engine, ChoicesShareThePromptAndEachIsItsSeedsTextAlone) {
  std::mt19937 rng(12);
  const int64_t bs = 8;
  std::vector<int32_t> p = random_prompt(rng, 45);  // 5 full blocks and a partial one
  EngineOptions eo;
  eo.block_size = bs;
  eo.max_running = 4;
  Engine e(*tiny().model, eo);
  std::vector<EngineOutcome> out(4);
  std::vector<int> tokens_seen(4, 0);
  GenerationRequest r;
  r.prompt = p;
  r.opts = opts(12, 0.9f, 500);
  r.tokenizer = tiny().tokenizer.get();
  r.n = 4;
  r.on_token = [&](const TokenEvent& ev) {
    tokens_seen[(size_t)ev.choice]++;
    return true;
  };
  r.on_done = [&](GenerateResult&& res, const std::string& err) {
    EngineOutcome& o = out[(size_t)res.choice];
    EXPECT_FALSE(o.done) << "choice " << res.choice << " ended twice";
    o.result = std::move(res);
    o.error = err;
    o.done = true;
  };
  e.submit(std::move(r));
  e.step();  // the prompt (45 rows, under the 256-row budget) and every choice's first token
  EngineStats st = e.stats();
  EXPECT_EQ(st.running, 4);
  // 5 shared full blocks + the shared partial one, then a private copy per writing choice: far
  // from the 4 x 6 that four separate prompts would hold.
  EXPECT_LE(st.blocks.used, 5 + 4 + 1);
  drain(e);
  for (int i = 0; i < 4; i++) {
    ASSERT_TRUE(out[(size_t)i].done) << i;
    EXPECT_EQ(out[(size_t)i].error, "");
    EXPECT_EQ(out[(size_t)i].result.tokens, alone(p, opts(12, 0.9f, 500 + (uint64_t)i))) << "choice " << i;
    EXPECT_EQ((int)out[(size_t)i].result.tokens.size(), tokens_seen[(size_t)i]);
    EXPECT_EQ(out[(size_t)i].result.prompt_tokens, 45);
  }
  EXPECT_NE(out[0].result.tokens, out[1].result.tokens);  // different seeds, different text
  EXPECT_EQ(e.stats().blocks.used, 0);
}

TEST(Engine, ChoicesBeyondTheRunningLimitAreRefusedAndUnforkedOnesStillEnd) {
  std::mt19937 rng(13);
  EngineOptions eo;
  eo.max_running = 2;
  Engine e(*tiny().model, eo);
  EngineOutcome o;
  GenerationRequest big = request(random_prompt(rng, 10), opts(5), o);
  big.n = 3;
  try {
    e.submit(std::move(big));
    ADD_FAILURE() << "n = 3 over max_running 2 was accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("--parallel"), std::string::npos) << err.what();
  }
  // Cancelled while waiting, before its prompt ran: both choices still hear the end.
  int ended = 0;
  GenerationRequest r = request(random_prompt(rng, 10), opts(5), o);
  r.n = 2;
  r.cancelled = [] { return true; };
  r.on_done = [&](GenerateResult&& res, const std::string&) {
    EXPECT_EQ(res.finish_reason, "cancelled");
    EXPECT_EQ(res.choice, ended);
    ended++;
  };
  e.submit(std::move(r));
  e.step();
  EXPECT_EQ(ended, 2);
  EXPECT_FALSE(e.has_work());
}

TEST(Engine, PreemptedSequencesAreRecomputedAndNobodyIsCorrupted) {
  std::mt19937 rng(3);
  EngineOptions eo;
  eo.ctx = 128;
  eo.block_size = 4;
  eo.kv_blocks = 40;  // 160 positions for 6 sequences of up to 70: the pool runs out
  eo.max_running = 6;
  Engine e(*tiny().model, eo);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<EngineOutcome> out(6);
  for (int i = 0; i < 6; i++) {
    prompts.push_back(random_prompt(rng, 30));
    e.submit(request(prompts.back(), opts(40), out[(size_t)i]));
  }
  drain(e);
  EXPECT_GT(e.stats().preemptions, 0u);
  for (int i = 0; i < 6; i++) EXPECT_EQ(out[(size_t)i].result.tokens, alone(prompts[(size_t)i], opts(40))) << i;
  EXPECT_EQ(e.stats().blocks.used, 0);
}

TEST(Engine, ConversationsSharingASystemPromptHoldItsBlocksOnce) {
  std::mt19937 rng(4);
  const int64_t bs = 16;
  std::vector<int32_t> system = random_prompt(rng, 200);
  EngineOptions eo;
  eo.block_size = bs;
  eo.max_running = 8;
  Engine e(*tiny().model, eo);
  std::vector<EngineOutcome> out(8);
  auto prompt = [&](int i) {
    std::vector<int32_t> p = system;
    for (int t = 0; t < 5; t++) p.push_back(100 + i * 7 + t);
    return p;
  };
  e.submit(request(prompt(0), opts(30), out[0]));
  for (int i = 0; i < 3; i++) e.step();  // the first conversation's prompt is computed and registered
  for (int i = 1; i < 8; i++) e.submit(request(prompt(i), opts(30), out[(size_t)i]));
  // Taken in as the first one's decodes leave room for prefill rows (a few steps).
  for (int i = 0; i < 10 && e.stats().running < 8; i++) e.step();
  EngineStats st = e.stats();
  EXPECT_EQ(st.running, 8);
  const int64_t shared = (int64_t)system.size() / bs;  // 12 full blocks of the system prompt
  const int64_t own = (int64_t)((system.size() + 5 + 30) / bs + 1) - shared;  // each one's tail
  EXPECT_LE(st.blocks.used, shared + 8 * (own + 1));
  EXPECT_LT(st.blocks.used, 2 * shared + 8 * (own + 1));  // nowhere near 8 copies
  drain(e);
  EXPECT_EQ(out[0].result.cached_tokens, 0);
  for (int i = 1; i < 8; i++) {
    EXPECT_EQ(out[(size_t)i].result.cached_tokens, shared * bs) << i;
    EXPECT_EQ(out[(size_t)i].result.tokens, alone(prompt(i), opts(30))) << i;
  }
  EXPECT_EQ(e.stats().blocks.used, 0);
  EXPECT_GE(e.stats().blocks.cached, shared);  // kept for the next conversation
}

TEST(Engine, ChunkedPrefillKeepsTheRunningStreamDecodingEveryStep) {
  std::mt19937 rng(5);
  EngineOptions eo;
  eo.max_running = 2;
  eo.step_tokens = 32;
  Engine e(*tiny().model, eo);
  EngineOutcome a, b;
  int a_tokens = 0;
  GenerationRequest ra = request(random_prompt(rng, 8), opts(60), a);
  ra.on_token = [&](const TokenEvent&) { return ++a_tokens, true; };
  e.submit(std::move(ra));
  e.step();
  e.step();
  ASSERT_EQ(a_tokens, 2);
  e.submit(request(random_prompt(rng, 400), opts(5), b));  // 16 prefill rows beside one decode: 25 steps
  for (int s = 0; s < 10; s++) {
    int before = a_tokens;
    e.step();
    EXPECT_EQ(a_tokens, before + 1) << "step " << s;  // a token for the decoding stream every step
    EXPECT_LE(e.stats().last_step_rows, 32);
  }
  drain(e);
  EXPECT_EQ(b.result.tokens.size(), 5u);
}

TEST(Engine, APromptArrivingWhileStreamsDecodeIsTakenInSharesTheirDecodesBound) {
  // 4 streams decoding, a 300-token prompt arrives: every step carries the 4 decodes plus at most
  // max(min rows, per-decode x 4) prefill rows, so the streams' steps stay short; once the streams
  // have finished, the rest of the prompt goes at the whole step budget.
  std::mt19937 rng(8);
  EngineOptions eo;
  eo.max_running = 5;
  eo.step_tokens = 128;
  eo.prefill_per_decode = 2;
  eo.prefill_min_rows = 4;
  Engine e(*tiny().model, eo);
  std::vector<EngineOutcome> streams(4);
  for (auto& o : streams) e.submit(request(random_prompt(rng, 6), opts(12), o));
  e.step();  // the four prompts, then four decoding streams
  EngineOutcome late;
  std::vector<int32_t> late_prompt = random_prompt(rng, 300);
  e.submit(request(late_prompt, opts(3), late));
  int64_t most_while_decoding = 0, most_after = 0;
  while (e.has_work()) {
    bool decoding = e.running() > 1;
    e.step();
    int64_t rows = e.stats().last_step_rows;
    int64_t& most = decoding ? most_while_decoding : most_after;
    most = std::max(most, rows);
  }
  EXPECT_EQ(most_while_decoding, 4 + 2 * 4);  // the bound, reached
  EXPECT_EQ(most_after, 128);                 // alone: the whole budget
  for (const EngineOutcome& o : streams) EXPECT_EQ(o.result.tokens.size(), 12u);
  EXPECT_EQ(late.result.tokens.size(), 3u);
  EXPECT_EQ(late.result.tokens, alone(late_prompt, opts(3)));  // taken in 12 rows at a time, same text
}

TEST(Engine, CancellingEveryRequestReturnsThePoolToEmpty) {
  std::mt19937 rng(6);
  EngineOptions eo;
  eo.max_running = 3;
  Engine e(*tiny().model, eo);
  std::vector<EngineOutcome> out(6);
  std::atomic<bool> stop_waiting{false};
  for (int i = 0; i < 6; i++) {
    GenerationRequest r = request(random_prompt(rng, 20 + i), opts(50), out[(size_t)i]);
    if (i == 0) r.on_token = [n = 0](const TokenEvent&) mutable { return ++n < 3; };  // the client stops after 3
    if (i >= 3) r.cancelled = [&] { return stop_waiting.load(); };                     // never admitted
    e.submit(std::move(r));
  }
  for (int s = 0; s < 5; s++) e.step();
  EXPECT_EQ(out[0].result.finish_reason, "cancelled");
  EXPECT_EQ(out[0].result.tokens.size(), 3u);
  stop_waiting = true;
  e.step();
  for (int i = 3; i < 6; i++) EXPECT_EQ(out[(size_t)i].result.finish_reason, "cancelled") << i;
  e.cancel_all();
  for (int i = 0; i < 6; i++) EXPECT_TRUE(out[(size_t)i].done) << i;
  EXPECT_FALSE(e.has_work());
  EXPECT_EQ(e.stats().blocks.used, 0);
}

TEST(Engine, SessionsReuseBlocksOtherSequencesLeft) {
  std::mt19937 rng(7);
  EngineOptions eo;
  eo.block_size = 8;
  Engine e(*tiny().model, eo);
  std::vector<int32_t> p = random_prompt(rng, 40);
  auto a = e.open_session();
  std::vector<float> la = a->forward(p);
  auto b = e.open_session();
  EXPECT_EQ(b->reuse_prefix(p), 32);  // 4 full blocks of 8, not the last token's
  std::vector<float> lb = b->forward(std::vector<int32_t>(p.begin() + 32, p.end()));
  for (size_t i = 0; i < la.size(); i++) ASSERT_NEAR(la[i], lb[i], 1e-4f * (1 + std::fabs(la[i])));
  EXPECT_EQ(b->truncate(20), 20);  // into a shared, registered block: the next write copies it
  b->forward({p[20], p[21]});
  std::vector<float> la2 = a->forward({5});  // a's blocks are untouched
  auto c = e.open_session();
  std::vector<int32_t> p2 = p;
  p2.push_back(5);
  std::vector<float> lc = c->forward(p2);
  for (size_t i = 0; i < la2.size(); i++) ASSERT_NEAR(la2[i], lc[i], 1e-4f * (1 + std::fabs(lc[i])));
}

TEST(Engine, TooSmallAPoolIsAClearErrorAtStart) {
  EngineOptions eo;
  eo.kv_blocks = 3;
  eo.block_size = 16;
  try {
    Engine e(*tiny().model, eo);
    FAIL();
  } catch (const Error& x) {
    EXPECT_NE(std::string(x.what()).find("--kv-memory"), std::string::npos) << x.what();
  }
}

TEST(Engine, SmallerKvCacheTypesStoreLessAndStayCloseToF32) {
  // bf16 and q8 caches: the bytes per position the format defines (bf16: 2 per value; q8: 1 per
  // value plus a 4-byte scale per head and position), and next-token distributions close to the
  // f32 cache's, teacher-forced over a text, yet not identical (the cache really is rounded).
  const ModelConfig& c = tiny().model->config();
  const size_t values = (size_t)(2 * c.n_layers * c.n_kv_heads * c.head_dim);  // K and V per position
  const size_t heads = (size_t)(2 * c.n_layers * c.n_kv_heads);
  EngineOptions f32;
  Engine reference(*tiny().model, f32);
  EXPECT_EQ(reference.bytes_per_token(), values * 4);
  std::string text;
  for (int i = 0; i < 5; i++) text += "In the beginning the servers answered one request at a time, and the queue grew. ";
  struct Case {
    kernels::KvType type;
    size_t bytes;
    double kl_bound;
  };
  for (Case k : {Case{kernels::KvType::BF16, values * 2, 1e-3}, Case{kernels::KvType::Q8, values + heads * 4, 1e-2}}) {
    SCOPED_TRACE(kernels::kv_type_name(k.type));
    EngineOptions o;
    o.kv_type = k.type;
    Engine e(*tiny().model, o);
    EXPECT_EQ(e.bytes_per_token(), k.bytes);
    ScoreResult r = score_text(e, *tiny().tokenizer, text, 0, {}, &reference);
    ASSERT_TRUE(r.vs_reference);
    EXPECT_GT(r.predicted, 60);
    EXPECT_GT(r.vs_reference->kl_mean, 0.0);
    EXPECT_LT(r.vs_reference->kl_mean, k.kl_bound);
    EXPECT_GT(r.vs_reference->same_top, 0.9);
  }
}
