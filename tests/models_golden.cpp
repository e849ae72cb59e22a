// kvad's logits against two independent references, on tiny synthesized checkpoints of each
// architecture (random weights, jittered norms): the float64 numpy forward of the peer harness
// (max |diff| <= 1e-3 x max|logit| at every position) and llama.cpp's greedy continuation (the
// tokens where both references agree must be kvad's too). Goldens: tools/make_model_goldens.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "one_sequence.h"
#include "core/fs.h"
#include "core/json.h"
#include "models/registry.h"
#include "models/synth.h"
#include "golden_synth.h"
#include "test_support.h"

using namespace kvad;

namespace {

struct ModelGoldenCase {
  Json j;
  std::string model_dir;
};

ModelGoldenCase load_arch_golden(const std::string& arch, DType dtype = DType::BF16) {
  ModelGoldenCase g;
  g.j = read_json_file(test::source_path("tests/golden/models/" + arch + ".json"));
  SynthOptions o = test::golden_synth_options(g.j["synth"], arch, test::temp_dir(arch));
  o.dtype = dtype;
  synthesize(o);
  g.model_dir = o.out;
  return g;
}

void expect_arch_logits_match(const Json& j, const std::vector<float>& logits, int64_t vocab, const std::string& what) {
  std::vector<int32_t> idx = j["indices"];
  size_t n = j["prompt"].size();
  for (size_t t = 0; t < n; t++) {
    double tol = 1e-3 * j["ref_max_abs"][t].get<double>(), worst = 0;
    for (size_t i = 0; i < idx.size(); i++) {
      double d = std::fabs(logits[t * vocab + idx[i]] - j["ref_logits"][t][i].get<double>());
      worst = std::max(worst, d);
    }
    EXPECT_LE(worst, tol) << what << ": position " << t;
    int64_t am = std::max_element(logits.begin() + t * vocab, logits.begin() + (t + 1) * vocab) - (logits.begin() + t * vocab);
    EXPECT_EQ(am, j["ref_argmax"][t].get<int64_t>()) << what << ": argmax at position " << t;
  }
}

class ModelGolden : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(ModelGolden, LogitsMatchNumpyReferenceAtEveryPosition) {
  for (WeightFormat fmt : {WeightFormat::AsStored, WeightFormat::F32}) {
    ModelGoldenCase g = load_arch_golden(GetParam());
    LoadOptions lo;
    lo.format = fmt;
    auto model = load_model_dir(g.model_dir, lo);
    std::vector<int32_t> prompt = g.j["prompt"];
    int64_t V = model->config().vocab_size;
    ASSERT_EQ(V, g.j["vocab"].get<int64_t>());
    test::OneSequence state(*model);
    std::vector<float> logits(prompt.size() * V);
    state.forward(prompt.data(), (int64_t)prompt.size(), logits.data(), true);
    expect_arch_logits_match(g.j, logits, V, std::string("batched ") + model->weight_format());
  }
}

TEST_P(ModelGolden, TokenByTokenEqualsBatched) {
  ModelGoldenCase g = load_arch_golden(GetParam());
  auto model = load_model_dir(g.model_dir, {});
  std::vector<int32_t> prompt = g.j["prompt"];
  int64_t V = model->config().vocab_size;
  test::OneSequence state(*model);
  std::vector<float> step(prompt.size() * V);
  // Decode path: one token at a time, then a 5-token chunk: the cache carries the rest.
  for (size_t t = 0; t < 6; t++) state.forward(&prompt[t], 1, &step[t * V]);
  state.forward(&prompt[6], 5, &step[6 * V], true);
  for (size_t t = 11; t < prompt.size(); t++) state.forward(&prompt[t], 1, &step[t * V]);
  expect_arch_logits_match(g.j, step, V, "incremental");
}

TEST_P(ModelGolden, GreedyContinuationMatchesWhereReferencesAgree) {
  ModelGoldenCase g = load_arch_golden(GetParam());
  auto model = load_model_dir(g.model_dir, {});
  std::vector<int32_t> seq = g.j["prompt"];
  std::vector<int32_t> ref = g.j["ref_greedy"], lc = g.j["llamacpp_greedy"];
  size_t agree = g.j["greedy_agree"];
  EXPECT_GE(agree, 16u) << "the references disagree early: regenerate the goldens with better-conditioned weights";
  int64_t V = model->config().vocab_size;
  test::OneSequence state(*model);
  std::vector<float> logits(V);
  state.forward(seq.data(), (int64_t)seq.size(), logits.data());
  for (size_t i = 0; i < ref.size(); i++) {
    int32_t next = (int32_t)(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (i < agree) {
      ASSERT_EQ(next, ref[i]) << "greedy token " << i << " (llama.cpp and numpy both say " << ref[i] << ")";
    }
    state.forward(&next, 1, logits.data());
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, ModelGolden, ::testing::Values("llama", "qwen2", "qwen3", "gpt2", "qwen3_moe", "qwen3_next"));
