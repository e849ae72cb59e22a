// Speculative decoding: greedy output is token for token the plain output for every base
// architecture, whatever the draft (the target's q4 copy, which agrees often; a random model,
// which almost never does; prompt lookup), alone and inside continuous batching; sampling keeps
// the target's distribution (chi-square, with a check that the test catches a naive rule); and a
// rollback leaves the cache as if the rejected drafts were never forwarded.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>

#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include "models/synth.h"
#include "runtime/engine.h"
#include "runtime/loader.h"
#include "runtime/speculative.h"
#include "test_support.h"
#include "greedy.h"

using namespace kvad;
using test::greedy;

namespace {

// A tiny synthesized model of `arch` (GPT-2's BPE cut to 512 tokens, for every family: one
// tokenizer, and a vocabulary small enough for the sanitised build); `seed` changes every weight.
std::string tiny_dir(const std::string& arch, uint64_t seed) {
  static std::map<std::string, std::string> dirs;
  std::string key = arch + "-" + std::to_string(seed);
  if (!dirs.count(key)) {
    std::string out = test::temp_dir("spec-" + key);
    test::RunResult r = test::run_kvad(fmt::format("synth --arch {} --preset tiny-v512 --seed {} --dtype f32 --std 0.1 "
                                                   "--out {} --force",
                                                   arch, seed, out));
    if (r.exit_code != 0) throw Error("synth failed: " + r.err);
    dirs[key] = out;
  }
  return dirs[key];
}

std::shared_ptr<LoadedModel> tiny(const std::string& arch, uint64_t seed, WeightFormat format = WeightFormat::AsStored) {
  LoadOptions lo;
  lo.format = format;
  return std::make_shared<LoadedModel>(load_model(tiny_dir(arch, seed), lo));
}

std::vector<int32_t> prompt_of(std::mt19937& rng, int n, int vocab) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; i++) p.push_back((int32_t)(rng() % (uint32_t)(vocab - 20)) + 10);
  // A repeated stretch, so prompt lookup has something to find.
  for (int i = 0; i < n / 2; i++) p.push_back(p[(size_t)i]);
  return p;
}


GenerateResult run(Engine& e, const LoadedModel& m, const std::vector<int32_t>& prompt, const GenerateOptions& g) {
  auto s = e.open_session();
  return generate(*s, *m.tokenizer, prompt, g, [](const TokenEvent&) { return true; });
}

struct SpeculationOutcome {
  GenerateResult result;
  std::string error;
  bool done = false;
};

GenerationRequest request(const LoadedModel& m, const std::vector<int32_t>& prompt, const GenerateOptions& g, SpeculationOutcome& out) {
  GenerationRequest r;
  r.prompt = prompt;
  r.opts = g;
  r.tokenizer = m.tokenizer.get();
  r.on_done = [&out](GenerateResult&& res, const std::string& err) {
    out.result = std::move(res);
    out.error = err;
    out.done = true;
  };
  return r;
}

}  // namespace

class GreedySpeculation : public ::testing::TestWithParam<std::string> {};

TEST_P(GreedySpeculation, OutputIsThePlainOutputForEveryDraftAloneAndBatched) {
  const std::string arch = GetParam();
  auto target = tiny(arch, 1);
  const int64_t V = target->model->config().vocab_size;
  struct Draft {
    std::string what;
    std::shared_ptr<DraftSource> source;
    double min_rate, max_rate;  // the acceptance this draft must show, or the test proves nothing
  };
  std::vector<Draft> drafts = {
      {"q8 copy", make_model_draft(tiny(arch, 1, WeightFormat::Q8), V, 512, 4, 0.0), 0.5, 1.0},
      {"random model", make_model_draft(tiny(arch, 7), V, 512, 4, 0.0), 0.0, 0.3},
      {"prompt lookup", make_lookup_draft(1, 4), 0.0, 1.0}};
  std::mt19937 rng(3);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 3; i++) prompts.push_back(prompt_of(rng, 12 + 9 * i, (int)V));
  EngineOptions eo;
  eo.ctx = 512;
  eo.max_running = 4;
  eo.block_size = 4;  // drafts cross block boundaries often
  Engine plain_engine(*target->model, eo);
  std::vector<std::vector<int32_t>> plain;
  for (const auto& p : prompts) plain.push_back(run(plain_engine, *target, p, greedy(40)).tokens);

  for (const Draft& d : drafts) {
    SCOPED_TRACE(arch + " drafted by " + d.what);
    GenerateOptions g = greedy(40);
    g.speculative.source = d.source;
    g.speculative.draft_max = 8;  // 9 rows: the verifying span reaches the matrix-product attention path
    int64_t drafted = 0, kept = 0;
    // One sequence over a session (run, chat).
    Engine e(*target->model, eo);
    for (size_t i = 0; i < prompts.size(); i++) {
      GenerateResult r = run(e, *target, prompts[i], g);
      EXPECT_EQ(r.tokens, plain[i]) << "prompt " << i;
      drafted += r.draft_tokens;
      kept += r.draft_accepted;
    }
    ASSERT_GT(drafted, 0);
    double rate = (double)kept / (double)drafted;
    EXPECT_GE(rate, d.min_rate);
    EXPECT_LE(rate, d.max_rate);
    // The step loop: speculating sequences share each step with a plain one.
    Engine batched(*target->model, eo);
    std::vector<SpeculationOutcome> out(prompts.size() + 1);
    for (size_t i = 0; i < prompts.size(); i++) batched.submit(request(*target, prompts[i], g, out[i]));
    batched.submit(request(*target, prompts[0], greedy(40), out.back()));
    for (int i = 0; i < 10000 && batched.has_work(); i++) batched.step();
    for (size_t i = 0; i < prompts.size(); i++) {
      ASSERT_TRUE(out[i].done) << out[i].error;
      EXPECT_EQ(out[i].result.tokens, plain[i]) << "batched prompt " << i;
    }
    EXPECT_EQ(out.back().result.tokens, plain[0]);
    EXPECT_GT(batched.stats().draft_tokens, 0);
    EXPECT_EQ(batched.stats().blocks.used, 0) << "every block went back to the pool";
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, GreedySpeculation, ::testing::Values("llama", "qwen2", "qwen3", "gpt2"));

TEST(Speculation, RollbackLeavesTheCacheAsIfRejectedDraftsWereNeverForwarded) {
  auto target = tiny("qwen2", 1);
  const int64_t V = target->model->config().vocab_size;
  EngineOptions eo;
  eo.ctx = 512;
  eo.block_size = 4;
  Engine e(*target->model, eo);
  std::mt19937 rng(5);
  std::vector<int32_t> prompt = prompt_of(rng, 20, (int)V);
  GenerateOptions g = greedy(30);
  g.speculative.source = make_model_draft(tiny("qwen2", 7), V, 512, 1, 0.0);  // rejects often
  g.speculative.draft_max = 6;
  auto s = e.open_session();
  GenerateResult r = generate(*s, *target->tokenizer, prompt, g, [](const TokenEvent&) { return true; });
  ASSERT_GT(r.draft_tokens, r.draft_accepted) << "the test needs rejections";
  // Held: the prompt and every generated token but the last (sampled, never forwarded).
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), r.tokens.begin(), r.tokens.end() - 1);
  ASSERT_EQ(s->tokens(), all);
  EXPECT_EQ(s->kv_bytes(), (size_t)((s->cached() + 3) / 4) * e.bytes_per_block()) << "no block past the kept positions";
  // The next token's logits from this cache equal those of a cache that never saw a draft.
  std::vector<float> next = s->forward({r.tokens.back()});
  Engine fresh_engine(*target->model, eo);
  auto fresh = fresh_engine.open_session();
  all.push_back(r.tokens.back());
  std::vector<float> want = fresh->forward(all);
  ASSERT_EQ(next.size(), want.size());
  float worst = 0;
  for (size_t i = 0; i < want.size(); i++) worst = std::max(worst, std::abs(next[i] - want[i]));
  EXPECT_LT(worst, 1e-4f);
}

// The rejection rule over fixed distributions: what comes out follows p, and a naive rule (keep
// any draft p allows) visibly does not, so the chi-square below can tell them apart.
TEST(Speculation, VerifyKeepsTheTargetDistributionWhereANaiveRuleDoesNot) {
  const std::vector<double> p = {0.5, 0.3, 0.15, 0.05}, q = {0.1, 0.2, 0.3, 0.4};
  std::vector<float> logits;
  for (double x : p) logits.push_back((float)std::log(x));
  SamplingParams sp;
  sp.temperature = 1;
  sp.top_k = 0;
  sp.top_p = 1;
  sp.min_p = 0;
  sp.seed = 11;
  Sampler target(sp);
  TokenDistribution qd;
  for (int i = 0; i < 4; i++) qd.kept.push_back({q[(size_t)i], i});
  qd.total = 1;
  std::mt19937_64 draw(2);
  const int N = 20000;
  std::vector<int> exact(4), naive(4);
  for (int n = 0; n < N; n++) {
    std::uniform_real_distribution<double> u(0, 1);
    double r = u(draw);
    int32_t d = r < 0.1 ? 0 : r < 0.3 ? 1 : r < 0.6 ? 2 : 3;  // d ~ q
    std::vector<float> l = logits;
    target.prepare(l, {}, {});
    bool kept = false;
    exact[(size_t)target.verify(d, qd, kept)]++;
    naive[(size_t)(target.prepared().probability(d) > 0 ? d : target.draw())]++;
  }
  auto chi2 = [&](const std::vector<int>& h) {
    double c = 0;
    for (size_t i = 0; i < 4; i++) c += std::pow(h[i] - N * p[i], 2) / (N * p[i]);
    return c;
  };
  const double critical = 16.27;  // chi-square, 3 degrees of freedom, p = 0.001
  EXPECT_LT(chi2(exact), critical);
  EXPECT_GT(chi2(naive), 10 * critical);
}

// End to end: tokens 2 and 3 of seeded sampling runs, drafted by a random model and verified by
// the engine, against the target's exact distribution computed from its own logits.
TEST(Speculation, SampledTokensFollowTheTargetsDistribution) {
  auto target = tiny("qwen2", 1);
  const int64_t V = target->model->config().vocab_size;
  EngineOptions eo;
  eo.ctx = 64;
  Engine e(*target->model, eo);
  std::vector<int32_t> prompt = {100, 200, 300, 400, 50};
  SamplingParams sp;
  sp.temperature = 1.5f;  // a flat distribution: the draft's guesses get rejected often
  sp.top_k = 4;
  sp.top_p = 1;
  sp.min_p = 0;
  // The exact distribution of (t2, t3): sum over t1 of p(t1) p(t2 | t1) p(t3 | t1, t2).
  auto dist = [&](const std::vector<int32_t>& ctx) {
    auto s = e.open_session();
    std::vector<float> l = s->forward(ctx);
    Sampler smp(sp);
    smp.prepare(l, {}, {});
    std::map<int32_t, double> out;
    for (const auto& [w, id] : smp.prepared().kept) out[id] = w / smp.prepared().total;
    return out;
  };
  std::map<std::pair<int32_t, int32_t>, double> want;
  for (auto [t1, p1] : dist(prompt)) {
    std::vector<int32_t> c1 = prompt;
    c1.push_back(t1);
    for (auto [t2, p2] : dist(c1)) {
      std::vector<int32_t> c2 = c1;
      c2.push_back(t2);
      for (auto [t3, p3] : dist(c2)) want[{t2, t3}] += p1 * p2 * p3;
    }
  }
  GenerateOptions g;
  g.sampling = sp;
  g.max_tokens = 3;
  g.reuse_prefix = false;
  // The q4 copy: its top 4 mostly overlap the target's, in other proportions, so some drafts are
  // kept and some are rejected and resampled from the residual.
  g.speculative.source = make_model_draft(tiny("qwen2", 1, WeightFormat::Q4), V, 64, 1, 0.0);
  g.speculative.draft_max = 2;
  const int N = 8000;  // enough that a naive rule (keep any draft p allows) lands well past the critical value
  std::map<std::pair<int32_t, int32_t>, int> got;
  int64_t drafted = 0, kept = 0;
  auto s = e.open_session();
  for (int n = 0; n < N; n++) {
    g.sampling.seed = (uint64_t)n;
    GenerateResult r = generate(*s, *target->tokenizer, prompt, g, [](const TokenEvent&) { return true; });
    ASSERT_EQ(r.tokens.size(), 3u);
    got[{r.tokens[1], r.tokens[2]}]++;
    drafted += r.draft_tokens;
    kept += r.draft_accepted;
  }
  ASSERT_GT(drafted - kept, N / 10) << "the test needs rejections (residual draws)";
  ASSERT_GT(kept, N / 10) << "and kept drafts";
  // Cells expected fewer than 5 times are pooled into one.
  double chi2 = 0, pooled_want = 0, pooled_got = 0;
  int cells = 0;
  for (const auto& [k, p] : want) {
    double ex = p * N;
    int ob = got.count(k) ? got[k] : 0;
    if (ex < 5) {
      pooled_want += ex;
      pooled_got += ob;
      continue;
    }
    chi2 += (ob - ex) * (ob - ex) / ex;
    cells++;
  }
  if (pooled_want > 0) {
    chi2 += (pooled_got - pooled_want) * (pooled_got - pooled_want) / pooled_want;
    cells++;
  }
  for (const auto& [k, c] : got) EXPECT_TRUE(want.count(k)) << "an impossible pair came out";
  // Wilson-Hilferty: the chi-square quantile at p = 0.001 for cells - 1 degrees of freedom.
  double df = cells - 1, z = 3.09;
  double critical = df * std::pow(1 - 2 / (9 * df) + z * std::sqrt(2 / (9 * df)), 3);
  EXPECT_LT(chi2, critical) << cells << " cells";
}

TEST(Speculation, PromptLookupProposesWhatFollowedTheLatestMatch) {
  auto src = make_lookup_draft(1, 3);
  auto d = src->open(SamplingParams{});
  DraftProposal out;
  // "5 6 7" occurred twice; the latest is followed by 9 8, then the tail itself.
  std::vector<int32_t> c = {5, 6, 7, 1, 2, 5, 6, 7, 9, 8, 5, 6, 7};
  d->propose(c, 4, out);
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{9, 8, 5, 6}));
  d->propose(c, 1, out);
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{9}));
  std::vector<int32_t> none = {1, 2, 3, 4};
  d->propose(none, 4, out);
  EXPECT_TRUE(out.tokens.empty());
}

TEST(Speculation, ADraftWithAnotherTokenizerIsRefused) {
  auto target = tiny("qwen2", 1);
  // The same model with two of its tokenizer's ids swapped.
  std::string other = test::temp_dir("spec-other-tokenizer");
  std::filesystem::copy(tiny_dir("qwen2", 1), other, std::filesystem::copy_options::recursive);
  Json tj = read_json_file(other + "/tokenizer.json");
  Json& vocab = tj["model"]["vocab"];
  std::string a, b;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (it.value() == 300) a = it.key();
    if (it.value() == 301) b = it.key();
  }
  ASSERT_FALSE(a.empty() || b.empty());
  std::swap(vocab[a], vocab[b]);
  atomic_write_file(other + "/tokenizer.json", tj.dump());
  LoadedModel draft = load_model(other, {});
  try {
    check_draft_vocabulary(*target, draft);
    FAIL() << "accepted a draft whose token 300 is another text";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token 300 differs"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(check_draft_vocabulary(*target, *tiny("llama", 1)));  // same tokenizer, another family
}

TEST(Speculation, DraftLengthGrowsOnKeptRunsAndBacksOffFromMisses) {
  SpeculativeOptions o;
  o.draft_max = 6;
  DraftLength d(o);
  int64_t k = d.next();
  for (int i = 0; i < 5; i++) {
    d.update(k, k);
    k = d.next();
  }
  EXPECT_EQ(k, 6) << "every draft kept: up to --draft-max";
  d.update(k, 2);
  EXPECT_EQ(d.next(), 3) << "a rejection after 2 kept: the next proposal reaches one past them";
  // Whole proposals rejected: drafting pauses 1, then 2, then 4 steps, proposing 1 between.
  std::vector<int64_t> seen;
  for (int i = 0; i < 10; i++) {
    int64_t n = d.next();
    seen.push_back(n);
    if (n > 0) d.update(n, 0);
  }
  EXPECT_EQ(seen, (std::vector<int64_t>{3, 0, 1, 0, 0, 1, 0, 0, 0, 0}));
}

// The rows of a verifying forward are what one-token forwards compute, bit for bit, for quantised
// weights (integer dot products, and attention row by row for the span: AttentionSpan::rowwise),
// so greedy speculation there is exactly plain decoding even at a near-tie. f32 / bf16 matrix
// products sum a one-row decode in another order than a multi-row tile (docs/speculative.md).
// Twelve rows reach the matrix-product attention path for any head grouping of the tiny models.
// GGUF K-quants too (llama.cpp's Q4_K_M and Q6_K files): their prefill tiles add in their own
// order, so a verifying forward keeps the row kernels (kernels::set_kq_tiles_allowed).
TEST(Speculation, AVerifyingForwardComputesEachRowAsADecodeStepDoes) {
  const std::string q4km = test::source_path("tests/fixtures/gguf/llama-q4_k_m.gguf"),
                    q6k = test::source_path("tests/fixtures/gguf/qwen2-q6_k.gguf");
  for (int f = 0; f < 4; f++) {
    std::shared_ptr<LoadedModel> m = f == 0   ? tiny("qwen2", 1, WeightFormat::Q8)
                                     : f == 1 ? tiny("qwen2", 1, WeightFormat::Q4)
                                              : std::make_shared<LoadedModel>(load_model(f == 2 ? q4km : q6k, LoadOptions{}));
    EngineOptions eo;
    eo.ctx = 256;
    eo.block_size = 4;
    Engine e(*m->model, eo);
    std::mt19937 rng(9);
    std::vector<int32_t> prompt = prompt_of(rng, 10, 512), next = prompt_of(rng, 8, 512);
    next.resize(12);
    auto a = e.open_session(), b = e.open_session();
    a->forward(prompt);
    b->forward(prompt);
    std::vector<float> together = a->forward_tentative(next, /*all_rows=*/true);
    const size_t V = (size_t)m->model->config().vocab_size;
    for (size_t i = 0; i < next.size(); i++) {
      const std::vector<float>& alone = b->forward({next[i]});
      EXPECT_EQ(0, std::memcmp(alone.data(), together.data() + i * V, V * sizeof(float)))
          << "row " << i << " of format " << (int)f;
    }
  }
}
