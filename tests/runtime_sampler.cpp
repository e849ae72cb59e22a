#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"
#include "runtime/generate.h"
#include "runtime/sampler.h"

using namespace kvad;

namespace {
std::vector<float> logits_from_probs(const std::vector<double>& p) {
  std::vector<float> l;
  for (double x : p) l.push_back((float)std::log(x));
  return l;
}

std::map<int32_t, int> histogram(SamplingParams sp, const std::vector<float>& logits, int n) {
  Sampler s(sp);
  std::map<int32_t, int> h;
  for (int i = 0; i < n; i++) {
    std::vector<float> l = logits;
    h[s.sample(l, {}, {})]++;
  }
  return h;
}
}  // namespace

TEST(Sampler, GreedyPicksArgmax) {
  SamplingParams p;
  p.temperature = 0;
  Sampler s(p);
  std::vector<float> l = {0.1f, 3.0f, -1.0f, 2.9f};
  EXPECT_EQ(s.sample(l, {}, {}), 1);
}

TEST(Sampler, SameSeedSameSequenceOtherSeedDiffers) {
  std::vector<float> base(1000);
  for (size_t i = 0; i < base.size(); i++) base[i] = (float)std::sin(i * 0.37) * 2;
  auto run = [&](uint64_t seed) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1;
    p.min_p = 0;
    p.seed = seed;
    Sampler s(p);
    std::vector<int32_t> out;
    for (int i = 0; i < 50; i++) {
      std::vector<float> l = base;
      out.push_back(s.sample(l, {}, {}));
    }
    return out;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

TEST(Sampler, FrequenciesFollowTheDistribution) {
  SamplingParams p;
  p.temperature = 1;
  p.top_k = 0;
  p.top_p = 1;
  p.min_p = 0;
  p.seed = 3;
  auto h = histogram(p, logits_from_probs({0.5, 0.3, 0.2}), 20000);
  EXPECT_NEAR(h[0] / 20000.0, 0.5, 0.02);
  EXPECT_NEAR(h[1] / 20000.0, 0.3, 0.02);
  EXPECT_NEAR(h[2] / 20000.0, 0.2, 0.02);
}

TEST(Sampler, TopKTopPMinPCutTheTail) {
  std::vector<float> l = logits_from_probs({0.4, 0.3, 0.2, 0.07, 0.03});
  SamplingParams p;
  p.temperature = 1;
  p.top_p = 1;
  p.min_p = 0;
  p.top_k = 2;
  auto h = histogram(p, l, 3000);
  EXPECT_EQ(h.count(2) + h.count(3) + h.count(4), 0u);
  EXPECT_GT(h[1], 500);
  p.top_k = 0;
  p.top_p = 0.85f;  // 0.4 + 0.3 + 0.2 = 0.9 >= 0.85: tokens 0..2
  h = histogram(p, l, 3000);
  EXPECT_EQ(h.count(3) + h.count(4), 0u);
  EXPECT_GT(h[2], 300);
  p.top_p = 1;
  p.min_p = 0.5f;  // keep p >= 0.2: tokens 0..2
  h = histogram(p, l, 3000);
  EXPECT_EQ(h.count(3) + h.count(4), 0u);
  EXPECT_GT(h[2], 300);
}

TEST(Sampler, TemperatureSharpens) {
  std::vector<float> l = logits_from_probs({0.6, 0.4});
  SamplingParams p;
  p.top_k = 0;
  p.top_p = 1;
  p.min_p = 0;
  p.temperature = 0.25f;  // p ~ 0.6^4 : 0.4^4 = 0.835 : 0.165
  auto h = histogram(p, l, 20000);
  EXPECT_NEAR(h[0] / 20000.0, 0.835, 0.02);
}

TEST(Sampler, Penalties) {
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 2.0f;
  Sampler s(p);
  std::vector<float> l = {2.0f, 1.5f, -1.0f};
  EXPECT_EQ(s.sample(l, {0}, {}), 1);  // 2.0 / 2 = 1.0 < 1.5
  EXPECT_FLOAT_EQ(l[0], 1.0f);
  SamplingParams q;
  q.temperature = 0;
  q.presence_penalty = 0.3f;
  q.frequency_penalty = 0.2f;
  Sampler s2(q);
  std::vector<float> l2 = {2.0f, 1.5f, 0.0f};
  // token 0 generated twice: 2.0 - 2*0.2 - 0.3 = 1.3 < 1.5
  EXPECT_EQ(s2.sample(l2, {0, 0}, {0, 0}), 1);
  EXPECT_FLOAT_EQ(l2[0], 1.3f);
}

// The distribution prepare() leaves, over a vocabulary large enough for the SIMD passes, the
// chunked top-k and the widening nucleus search, against the definition written out in double:
// z = logit / T; the top_k largest (ties to the lower id); the shortest prefix of them in
// decreasing order whose probability reaches top_p; then tokens under min_p x the top one's
// probability dropped (the top one always stays). Masked tokens (-inf) never appear.
TEST(Sampler, PreparedDistributionIsTheDefinition) {
  Rng rng(41);
  const int V = 20011;
  std::vector<float> base(V);
  for (float& l : base) l = (float)(rng.normal() * 2.5);
  for (int i = 0; i < V; i += 97) base[(size_t)i] = -INFINITY;  // a grammar's mask
  base[5] = base[9] = 11.0f;                                     // a tie at the top
  base[100] = base[200] = base[300] = 7.25f;                     // ties further down
  int cases = 0;
  for (float temperature : {0.6f, 1.0f, 1.7f})
    for (int top_k : {0, 1, 2, 40, 3000})
      for (float top_p : {1.0f, 0.95f, 0.5f})
        for (float min_p : {0.0f, 0.02f}) {
          SamplingParams p;
          p.temperature = temperature, p.top_k = top_k, p.top_p = top_p, p.min_p = min_p;
          // The definition.
          std::vector<int32_t> order(V);
          std::iota(order.begin(), order.end(), 0);
          std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
            return base[(size_t)a] > base[(size_t)b] || (base[(size_t)a] == base[(size_t)b] && a < b);
          });
          if (top_k > 0) order.resize((size_t)top_k);
          const double mx = base[(size_t)order[0]] / (double)temperature;
          auto weight = [&](int32_t id) { return std::exp(base[(size_t)id] / (double)temperature - mx); };
          double sum = 0;
          for (int32_t id : order) sum += weight(id);
          std::map<int32_t, double> want;
          double cum = 0;
          for (int32_t id : order) {
            if (!(weight(id) > 0) || (!want.empty() && weight(id) < min_p)) break;
            want[id] = weight(id);
            cum += weight(id) / sum;
            if (top_p < 1 && cum >= top_p) break;
          }
          double want_total = 0;
          for (const auto& [id, w] : want) want_total += w;
          // The sampler.
          Sampler s(p);
          std::vector<float> l = base;
          s.prepare(l, {}, {});
          const TokenDistribution& d = s.prepared();
          std::map<int32_t, double> got;
          d.for_each([&](float w, int32_t id) { got[id] += w; });
          std::string where = "T " + std::to_string(temperature) + " top_k " + std::to_string(top_k) + " top_p " +
                              std::to_string(top_p) + " min_p " + std::to_string(min_p);
          ASSERT_EQ(got.size(), want.size()) << where;
          for (const auto& [id, w] : want) {
            ASSERT_TRUE(got.count(id)) << where << ": token " << id << " missing";
            ASSERT_NEAR(got[id] / d.total, w / want_total, 2e-6 * w / want_total + 1e-12) << where << " token " << id;
          }
          cases++;
        }
  EXPECT_EQ(cases, 90);
}

// Temperature alone keeps a weight for every id and draws by finding the run of 1,024 weights
// first: tokens at the first, a middle and the last id of a 5,000-token vocabulary (five runs, the
// last one short), and the mass spread over the others, come out in proportion.
TEST(Sampler, DrawsFromAWholeVocabularyInProportion) {
  const int V = 5000;
  std::vector<double> p(V, 0.1 / (V - 3));
  p[0] = 0.2, p[2500] = 0.3, p[4999] = 0.4;
  SamplingParams sp;
  sp.temperature = 1, sp.top_k = 0, sp.top_p = 1, sp.min_p = 0, sp.seed = 9;
  const int n = 40000;
  std::map<int32_t, int> h = histogram(sp, logits_from_probs(p), n);
  EXPECT_NEAR(h[0] / (double)n, 0.2, 0.01);
  EXPECT_NEAR(h[2500] / (double)n, 0.3, 0.01);
  EXPECT_NEAR(h[4999] / (double)n, 0.4, 0.01);
  int64_t rest = 0, runs_seen = 0;
  std::vector<int> per_run(5, 0);
  for (const auto& [id, c] : h)
    if (id != 0 && id != 2500 && id != 4999) rest += c, per_run[(size_t)id / 1024] += c;
  EXPECT_NEAR(rest / (double)n, 0.1, 0.01);
  for (int c : per_run) runs_seen += c > 0;
  EXPECT_EQ(runs_seen, 5) << "every run of the spread mass is drawn from";
}

TEST(Sampler, RejectsBadParameters) {
  SamplingParams p;
  p.top_p = 0;
  EXPECT_THROW(Sampler{p}, Error);
  p = {};
  p.temperature = -1;
  EXPECT_THROW(Sampler{p}, Error);
  p = {};
  p.presence_penalty = 3;
  EXPECT_THROW(Sampler{p}, Error);
}

TEST(StopMatcher, HoldsBackPossibleStopAndCutsIt) {
  StopMatcher m({"END", "\n\n"});
  EXPECT_EQ(m.push("Hello E"), "Hello ");
  EXPECT_EQ(m.push("N"), "");
  EXPECT_EQ(m.push("X more"), "ENX more");
  EXPECT_EQ(m.push(" fin\n"), " fin");
  EXPECT_EQ(m.push("\nignored"), "");
  EXPECT_TRUE(m.stopped());
  StopMatcher n({"stop"});
  EXPECT_EQ(n.push("abc sto"), "abc ");
  EXPECT_EQ(n.flush(), "sto");
  StopMatcher none({});
  EXPECT_EQ(none.push("anything"), "anything");
}
