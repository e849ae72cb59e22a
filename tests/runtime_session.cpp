// The Session seam and generation over a tiny synthesized model.
#include <gtest/gtest.h>

#include "core/error.h"
#include "models/synth.h"
#include "runtime/generate.h"
#include "runtime/loader.h"
#include "runtime/engine.h"
#include "runtime/session.h"
#include <filesystem>

#include "test_support.h"
#include "tiny_qwen2.h"
#include "greedy.h"

using namespace kvad;
using test::greedy;

namespace {

const LoadedModel& tiny_qwen() { return test::tiny_qwen2(); }

Engine& engine() {
  static Engine e(*tiny_qwen().model, EngineOptions{});
  return e;
}


}  // namespace

TEST(Session, TruncateReturnsWhereItLandedAndForwardContinues) {
  auto s = engine().open_session();
  std::vector<float> a = s->forward({1, 2, 3, 4, 5});
  EXPECT_EQ(s->cached(), 5);
  EXPECT_EQ(s->truncate(3), 3);
  EXPECT_EQ(s->tokens(), (std::vector<int32_t>{1, 2, 3}));
  std::vector<float> b = s->forward({4, 5});
  for (size_t i = 0; i < a.size(); i++) ASSERT_NEAR(a[i], b[i], 1e-5);
  EXPECT_EQ(s->truncate(100), 5);  // cannot grow by truncating
  EXPECT_GT(s->kv_bytes(), 0u);
  EXPECT_EQ(s->kv_bytes_per_token(), (size_t)(2 * 2 * 2 * 16 * 4));  // layers * K,V * kv_heads * head_dim * f32
}

TEST(Session, PrefixReuseKeepsCommonPrefixAndGivesSameText) {
  const LoadedModel& m = tiny_qwen();
  std::vector<int32_t> p1 = m.tokenizer->encode("The quick brown fox jumps over the lazy dog");
  std::vector<int32_t> p2 = m.tokenizer->encode("The quick brown fox jumps over the lazy cat and runs");
  auto cold = engine().open_session();
  GenerateResult fresh = generate(*cold, *m.tokenizer, p2, greedy(12), [](const TokenEvent&) { return true; });
  EXPECT_EQ(fresh.cached_tokens, 0);
  auto warm = engine().open_session();
  generate(*warm, *m.tokenizer, p1, greedy(4), [](const TokenEvent&) { return true; });
  GenerateResult reused = generate(*warm, *m.tokenizer, p2, greedy(12), [](const TokenEvent&) { return true; });
  size_t common = 0;
  while (p1[common] == p2[common]) common++;
  EXPECT_EQ(reused.cached_tokens, (int64_t)common);
  EXPECT_EQ(reused.tokens, fresh.tokens);
  // The identical prompt again: everything but the last token is reused.
  GenerateResult again = generate(*warm, *m.tokenizer, p2, greedy(12), [](const TokenEvent&) { return true; });
  EXPECT_EQ(again.cached_tokens, (int64_t)p2.size() - 1);
  EXPECT_EQ(again.tokens, fresh.tokens);
}

TEST(Generate, StopsOnEosStopStringsAndLength) {
  const LoadedModel& m = tiny_qwen();
  std::vector<int32_t> prompt = m.tokenizer->encode("Once upon a time");
  auto s = engine().open_session();
  GenerateResult r = generate(*s, *m.tokenizer, prompt, greedy(10), [](const TokenEvent&) { return true; });
  ASSERT_EQ(r.tokens.size(), 10u);
  EXPECT_EQ(r.finish_reason, "length");
  // Make the 4th greedy token an EOS id: generation ends there with "stop".
  GenerateOptions g = greedy(10);
  g.stop_ids = {r.tokens[3]};
  GenerateResult e = generate(*s, *m.tokenizer, prompt, g, [](const TokenEvent&) { return true; });
  EXPECT_EQ(e.finish_reason, "stop");
  EXPECT_EQ(e.tokens.size(), std::find(r.tokens.begin(), r.tokens.end(), r.tokens[3]) - r.tokens.begin() + 1);
  // A stop string taken from the middle of the text: output ends right before it.
  std::string piece = m.tokenizer->decode({r.tokens[5]});
  GenerateOptions st = greedy(10);
  st.stop = {piece};
  GenerateResult sr = generate(*s, *m.tokenizer, prompt, st, [](const TokenEvent&) { return true; });
  EXPECT_EQ(sr.finish_reason, "stop");
  EXPECT_EQ(sr.text, r.text.substr(0, r.text.find(piece)));
  // Cancelling from the callback.
  int seen = 0;
  GenerateResult c = generate(*s, *m.tokenizer, prompt, greedy(10), [&](const TokenEvent&) { return ++seen < 3; });
  EXPECT_EQ(c.finish_reason, "cancelled");
  EXPECT_EQ(c.tokens.size(), 3u);
}

TEST(Generate, PromptLongerThanContextIsAClearError) {
  const LoadedModel& m = tiny_qwen();
  auto s = engine().open_session();
  std::vector<int32_t> prompt((size_t)m.model->context_length() + 5, 100);
  try {
    generate(*s, *m.tokenizer, prompt, greedy(3), [](const TokenEvent&) { return true; });
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("context is 4096 tokens"), std::string::npos) << e.what();
  }
}
