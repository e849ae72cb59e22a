// Prints what a constraint costs per token on Qwen's 151,936-entry vocabulary (docs/grammar.md
// quotes these figures). Measures, never asserts a time: machines differ.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "fixture_tokenizer.h"
#include "grammar/matcher.h"
#include "runtime/generate.h"

using namespace kvad;

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

struct Timings {
  std::vector<double> ms;
  void print(const char* what) {
    std::vector<double> s = ms;
    std::sort(s.begin(), s.end());
    double sum = 0;
    for (double x : s) sum += x;
    std::printf("%-44s tokens %4zu  mean %.3f ms  p50 %.3f  p90 %.3f  p99 %.3f  max %.3f\n", what, s.size(),
                sum / (double)s.size(), s[s.size() / 2], s[s.size() * 9 / 10], s[s.size() * 99 / 100], s.back());
  }
};

const char* const kSchema = R"({"type":"object","properties":{
  "id":{"type":"string","format":"uuid"},
  "name":{"type":"string"},
  "email":{"type":"string"},
  "age":{"type":"integer"},
  "balance":{"type":"number"},
  "active":{"type":"boolean"},
  "role":{"enum":["admin","user","guest"]},
  "created":{"type":"string","format":"date-time"},
  "tags":{"type":"array","items":{"type":"string"}},
  "address":{"type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"},"zip":{"type":"string"}},
             "required":["street","city"]},
  "friends":{"type":"array","items":{"type":"object","properties":{"name":{"type":"string"},"since":{"type":"integer"}},
             "required":["name"]}}},
  "required":["id","name","age","active","role","tags","address"]})";

const char* const kDocument = R"({"id": "123e4567-e89b-12d3-a456-426614174000", "name": "Ada Lovelace",
  "email": "ada@example.com", "age": 36, "balance": 1234.56, "active": true, "role": "admin",
  "created": "1843-07-01T09:30:00Z", "tags": ["math", "engines", "poetry"],
  "address": {"street": "12 St James's Square", "city": "London", "zip": "SW1Y 4JH"},
  "friends": [{"name": "Charles Babbage", "since": 1833}, {"name": "Mary Somerville", "since": 1834}]})";

}  // namespace

TEST(GrammarBench, PerTokenMaskOnQwenVocabulary) {
  Tokenizer tok = test::load_fixture_tokenizer("qwen3");
  const int32_t eos = *tok.eos_id();
  auto t0 = Clock::now();
  auto vocab = grammar_vocab(tok, {eos});
  std::printf("vocabulary %d tokens: trie of %zu nodes built in %.1f ms\n", tok.vocab_size(), vocab->nodes.size(), ms_since(t0));
  t0 = Clock::now();
  grammar::Constraint c = grammar::compile_json_schema(OrderedJson::parse(kSchema));
  std::printf("schema -> grammar (%zu rules) in %.2f ms\n", c.grammar->alts.size(), ms_since(t0));
  std::vector<int32_t> doc = tok.encode(kDocument);
  std::vector<float> logits((size_t)tok.vocab_size() + 128, 0.0f);

  // A model that writes this document: mask + advance per token on a new matcher, as a request
  // sees it (a state's first visit builds its mask, later visits reuse it).
  grammar::GrammarMatcher m(c.grammar, vocab);
  Timings cold;
  for (int32_t t : doc) {
    auto s = Clock::now();
    m.mask_logits(logits.data(), (int64_t)logits.size());
    ASSERT_TRUE(m.accept(t)) << tok.decode({t});
    cold.ms.push_back(ms_since(s));
  }
  EXPECT_TRUE(m.accepting());
  size_t states = m.states();
  cold.print("document, new matcher (mask + advance)");
  std::printf("  %zu DFA states built for %zu tokens\n", states, doc.size());

  // Random choices among the allowed tokens: the JSON a random model writes (long strings, odd
  // whitespace), measured in the generation loop itself.
  Timings random_walk, unconstrained;
  for (uint64_t seed = 0; seed < 3; seed++) {
    GenerateOptions g;
    g.sampling.temperature = 1.0f;
    g.sampling.seed = seed;
    g.max_tokens = 300;
    g.stop_ids = {eos};
    GenerateOptions free = g;
    g.constraint = c;
    g.constraint_vocab = vocab;
    TokenGenerator gen(tok, {1}, g), plain(tok, {1}, free);
    std::mt19937 rng((uint32_t)seed);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> l((size_t)tok.vocab_size());
    TokenEvent ev;
    for (int i = 0; i < 300; i++) {
      for (float& x : l) x = normal(rng);
      auto s = Clock::now();
      bool end = gen.next(l.data(), (int64_t)l.size(), ev);
      random_walk.ms.push_back(ms_since(s));
      s = Clock::now();
      plain.next(l.data(), (int64_t)l.size(), ev);
      unconstrained.ms.push_back(ms_since(s));
      if (end) break;
    }
  }
  random_walk.print("random logits, TokenGenerator::next with it");
  unconstrained.print("random logits, TokenGenerator::next without");
}
