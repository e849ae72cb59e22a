// DeepSeek V2 / V2-Lite / V3 (multi-head latent attention, YaRN) against the float64 numpy reference
// of the peer harness (../shared/peer/ref_forward.py), on tiny dense checkpoints (random weights,
// jittered norms): logits at every position within 1e-3 x max|logit|, token by token as in one
// prefill, rows of several sequences in one batch as each alone, and the reference's greedy
// continuation. Goldens: tools/make_model_goldens.py deepseek_v2:tiny-deepseek-v2-lite-dense ...
// (llama.cpp cannot load a DeepSeek without shared experts, so the reference is numpy's alone).
// Also: the cache stores one latent row a position and layer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include "io/safetensors.h"
#include "logit_golden.h"
#include "models/registry.h"
#include "models/rope.h"
#include "models/synth.h"
#include "one_sequence.h"
#include "test_support.h"

using namespace kvad;
using test::expect_logits_match;
using test::Golden;
using test::load_golden;

namespace {

// A registered preset's config.json keys, with its architecture named (as synth writes it).
Json preset_config(const std::string& arch, const std::string& preset) {
  const Architecture* a = find_architecture(Json{{"architectures", {arch}}});
  if (a)
    for (const SynthPreset& p : a->presets)
      if (p.name == preset) {
        Json c = p.config;
        c["architectures"] = {arch};
        return c;
      }
  ADD_FAILURE() << "no preset " << preset << " of " << arch;
  return Json::object();
}

class DeepseekGolden : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(DeepseekGolden, LogitsMatchNumpyReferenceAtEveryPosition) {
  Golden g = load_golden(GetParam());
  for (WeightFormat fmt : {WeightFormat::F32, WeightFormat::AsStored}) {
    LoadOptions lo;
    lo.format = fmt;
    auto model = load_model_dir(g.model_dir, lo);
    int64_t V = model->config().vocab_size;
    ASSERT_EQ(V, g.j["vocab"].get<int64_t>());
    test::OneSequence seq(*model);
    std::vector<float> logits(g.prompt.size() * V);
    seq.forward(g.prompt.data(), (int64_t)g.prompt.size(), logits.data(), true);
    expect_logits_match(g.j, logits, V, GetParam() + " prefill " + model->weight_format());
  }
}

TEST_P(DeepseekGolden, DecodingTokenByTokenEqualsThePrefill) {
  Golden g = load_golden(GetParam());
  auto model = load_model_dir(g.model_dir, {});
  int64_t V = model->config().vocab_size;
  test::OneSequence seq(*model, 4);  // blocks of 4: the latent rows cross block boundaries often
  std::vector<float> step(g.prompt.size() * V);
  for (size_t t = 0; t < 6; t++) seq.forward(&g.prompt[t], 1, &step[t * V]);
  seq.forward(&g.prompt[6], 5, &step[6 * V], true);  // a chunk on top of a decoded cache
  for (size_t t = 11; t < g.prompt.size(); t++) seq.forward(&g.prompt[t], 1, &step[t * V]);
  expect_logits_match(g.j, step, V, GetParam() + " token by token");
}

TEST_P(DeepseekGolden, RowsOfSeveralSequencesInOneBatchEqualEachAlone) {
  // Three sequences in one memory, each step mixing a prefill chunk of one with single tokens of
  // others at their own positions; each sequence's logits against its own run alone, and the
  // golden's sequence against the reference too.
  Golden g = load_golden(GetParam());
  auto model = load_model_dir(g.model_dir, {});
  const int64_t V = model->config().vocab_size, bs = 4, n = (int64_t)g.prompt.size();
  std::vector<std::vector<int32_t>> seqs = {g.prompt, g.prompt, g.prompt};
  std::reverse(seqs[1].begin(), seqs[1].end());
  std::rotate(seqs[2].begin(), seqs[2].begin() + 5, seqs[2].end());
  std::unique_ptr<Backend> ops = make_cpu_backend();
  const int64_t per_seq = n / bs;
  std::unique_ptr<Memory> mem = ops->make_memory(model->memory_spec(), 3 * per_seq, bs);
  std::vector<int32_t> order((size_t)(3 * per_seq));
  std::iota(order.begin(), order.end(), 0);
  std::reverse(order.begin(), order.end());  // blocks interleaved between the sequences
  std::vector<std::vector<int32_t>> tables(3);
  for (size_t i = 0; i < order.size(); i++) tables[i % 3].push_back(order[i]);

  // Per step, tokens of each sequence: {0: 7, 1: 1, 2: 3}, then {0: 1, 1: 8, 2: 1}, ... until all ran.
  const std::vector<std::array<int64_t, 3>> steps = {{7, 1, 3}, {1, 8, 1}, {8, 1, 12}, {0, 6, 0}};
  std::vector<std::vector<float>> got(3, std::vector<float>((size_t)(n * V)));
  std::array<int64_t, 3> pos{};
  for (const auto& step : steps) {
    Batch b;
    for (int s = 0; s < 3; s++)
      if (step[s] > 0)
        b.add(s, std::span<const int32_t>(seqs[s].data() + pos[s], (size_t)step[s]), pos[s], tables[s], bs, Logits::All);
    std::vector<float> out((size_t)(b.n_logits() * V));
    model->forward(b, *mem, *ops, out.data());
    int64_t row = 0;
    for (int s = 0; s < 3; s++)
      for (int64_t t = 0; t < step[s]; t++, row++)
        std::copy_n(out.data() + row * V, V, got[s].data() + (pos[s] + t) * V);
    for (int s = 0; s < 3; s++) pos[s] += step[s];
  }
  ASSERT_EQ(pos, (std::array<int64_t, 3>{n, n, n}));
  expect_logits_match(g.j, got[0], V, GetParam() + " batched with others");
  for (int s = 0; s < 3; s++) {
    test::OneSequence alone(*model);
    std::vector<float> ref((size_t)(n * V));
    alone.forward(seqs[s].data(), n, ref.data(), true);
    for (int64_t t = 0; t < n; t++) {
      float mx = 0, worst = 0;
      for (int64_t v = 0; v < V; v++) {
        mx = std::max(mx, std::fabs(ref[t * V + v]));
        worst = std::max(worst, std::fabs(ref[t * V + v] - got[s][t * V + v]));
      }
      EXPECT_LE(worst, 1e-4f * mx) << "sequence " << s << " position " << t;
    }
  }
}

TEST_P(DeepseekGolden, GreedyContinuationIsTheReferences) {
  Golden g = load_golden(GetParam());
  auto model = load_model_dir(g.model_dir, {});
  std::vector<int32_t> ref = g.j["ref_greedy"];
  int64_t V = model->config().vocab_size;
  test::OneSequence seq(*model);
  std::vector<float> logits(V);
  seq.forward(g.prompt.data(), (int64_t)g.prompt.size(), logits.data());
  for (size_t i = 0; i < ref.size(); i++) {
    int32_t next = (int32_t)(std::max_element(logits.begin(), logits.end()) - logits.begin());
    ASSERT_EQ(next, ref[i]) << "greedy token " << i;
    seq.forward(&next, 1, logits.data());
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, DeepseekGolden,
                         ::testing::Values(// MoE: V2-Lite greedy softmax + 2 shared experts, V2 group-limited
                                           // (groups by their best) x 16, V3 sigmoid + bias, top-2-sum groups
                                           "tiny-deepseek-v2-lite", "tiny-deepseek-v2", "tiny-deepseek-v3",
                                           // dense, what the MoE ones leave out: mscale != mscale_all_dim
                                           "tiny-deepseek-v2-dense",
                                           // V3's rope_interleave = false: rotate-half on the rope dims
                                           "tiny-deepseek-v3-dense-rope_interleave-false"),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace_if(s.begin(), s.end(), [](char ch) { return !std::isalnum(ch); }, '_');
                           return s;
                         });

TEST(DeepseekMemory, TheCacheHoldsOneLatentRowAPositionAndLayer) {
  Golden g = load_golden("tiny-deepseek-v2-lite");
  auto model = load_model_dir(g.model_dir, {});
  const ModelConfig& c = model->config();
  MemorySpec spec = model->memory_spec();
  ASSERT_EQ(c.mla.kv_lora_rank + c.mla.qk_rope_head_dim, 40);
  // kv_lora_rank + qk_rope_head_dim values a layer, not heads x (nope + rope + v) = 4 x 40 = 160.
  EXPECT_EQ(spec.bytes_per_token(), (size_t)(c.n_layers * 40 * 4));
  EXPECT_TRUE(spec.rewindable());
  spec.kv_type = kernels::KvType::BF16;
  EXPECT_EQ(spec.bytes_per_token(), (size_t)(c.n_layers * 40 * 2));
  spec.kv_type = kernels::KvType::Q8;
  EXPECT_EQ(spec.bytes_per_token(), (size_t)(c.n_layers * (40 + 4)));  // int8 and one f32 scale a row
  // DeepSeek-V2-Lite's shape: 27 layers x (512 + 64) f32 values = 62,208 bytes a position.
  EXPECT_EQ(MemorySpec::latent(27, 512 + 64).bytes_per_token(), (size_t)27 * 576 * 4);
}

TEST(DeepseekMemory, ACopiedBlockContinuesAsTheOriginal) {
  // copy_block is how a shared or cached block is copied before a sequence writes into it: the
  // copy's sequence must continue exactly as the original's does.
  Golden g = load_golden("tiny-deepseek-v2-dense");
  auto model = load_model_dir(g.model_dir, {});
  const int64_t V = model->config().vocab_size, bs = 4;
  std::unique_ptr<Backend> ops = make_cpu_backend();
  std::unique_ptr<Memory> mem = ops->make_memory(model->memory_spec(), 8, bs);
  std::vector<int32_t> a = {0, 1, 2}, b = {0, 1, 5};  // b shares a's first two blocks, copies the third
  std::vector<float> la(V), lb(V);
  Batch first;
  first.add(0, std::span<const int32_t>(g.prompt.data(), 10), 0, a, bs, Logits::Last);
  model->forward(first, *mem, *ops, la.data());
  mem->copy_block(2, 5, 10 - 8);
  for (auto [table, out] : {std::pair{&a, &la}, std::pair{&b, &lb}}) {
    Batch next;
    next.add(0, std::span<const int32_t>(g.prompt.data() + 10, 1), 10, *table, bs, Logits::Last);
    model->forward(next, *mem, *ops, out->data());
  }
  EXPECT_EQ(la, lb);
}

TEST(DeepseekConfig, RoutedLayersFollowFirstKDenseReplace) {
  Json c = preset_config("DeepseekV2ForCausalLM", "tiny-deepseek-v2");
  const Architecture& a = require_architecture(c, "config.json");
  ModelConfig mc = a.parse_config(c, "config.json");
  EXPECT_EQ(mc.moe.n_experts, 16);
  EXPECT_EQ(mc.moe.routing.top_k, 4);
  EXPECT_EQ(mc.moe.routing.n_groups, 4);
  EXPECT_EQ(mc.moe.routing.group_score, kernels::GroupScore::Max);  // V2: a group's best expert
  EXPECT_FLOAT_EQ(mc.moe.routing.scale, 16.0f);
  EXPECT_EQ(mc.moe.shared_intermediate, 2 * 32);
  EXPECT_FALSE(mc.moe.routed(0));  // first_k_dense_replace = 1
  EXPECT_TRUE(mc.moe.routed(1));
}

TEST(DeepseekConfig, V3sMultiTokenPredictionLayerIsKnownAndLeftUnread) {
  // DeepSeek-V3 checkpoints ship their MTP module as layer num_hidden_layers (here 3), which
  // nothing runs: the guard must let exactly those tensors pass when the config declares them.
  SynthOptions o;
  o.preset = "tiny-deepseek-v3";
  o.out = test::temp_dir("deepseek-mtp");
  o.max_shard_bytes = 20'000'000;  // sharded: the index names every tensor's file
  synthesize(o);
  write_safetensors(join_path(o.out, "mtp.safetensors"),
                    {{"model.layers.3.eh_proj.weight", DType::F32, {2, 2}, std::string(16, '\0')}});
  const std::string index = join_path(o.out, "model.safetensors.index.json"), config = join_path(o.out, "config.json");
  Json idx = read_json_file(index);
  idx["weight_map"]["model.layers.3.eh_proj.weight"] = "mtp.safetensors";
  atomic_write_file(index, idx.dump());
  try {
    load_model_dir(o.out, {});
    ADD_FAILURE() << "an undeclared extra layer loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.3.eh_proj.weight"), std::string::npos) << e.what();
  }
  Json c = read_json_file(config);
  c["num_nextn_predict_layers"] = 1;
  atomic_write_file(config, c.dump());
  EXPECT_NO_THROW(load_model_dir(o.out, {}));
}

TEST(DeepseekConfig, BadFieldsAreNamed) {
  const Json base = preset_config("DeepseekV3ForCausalLM", "tiny-deepseek-v3-dense");
  const Architecture& a = require_architecture(base, "config.json");
  auto error_of = [&](const Json& c) -> std::string {
    try {
      a.parse_config(c, "m/config.json");
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(error_of(base), "");
  Json c = base;
  c.erase("kv_lora_rank");
  EXPECT_NE(error_of(c).find("'kv_lora_rank'"), std::string::npos) << error_of(c);
  c = base;
  c["qk_rope_head_dim"] = 7;
  EXPECT_NE(error_of(c).find("qk_rope_head_dim"), std::string::npos) << error_of(c);
  c = base;
  c["rope_scaling"]["type"] = "longrope";
  EXPECT_NE(error_of(c).find("'longrope'"), std::string::npos) << error_of(c);
  c = base;
  c["rope_scaling"]["beta_fast"] = 0.5;
  EXPECT_NE(error_of(c).find("beta_fast"), std::string::npos) << error_of(c);
  c = base;
  c["n_routed_experts"] = 16;
  c["num_experts_per_tok"] = 17;
  EXPECT_NE(error_of(c).find("num_experts_per_tok"), std::string::npos) << error_of(c);
  c = base;
  c["scoring_func"] = "relu";
  c["n_routed_experts"] = 16;
  EXPECT_NE(error_of(c).find("'relu'"), std::string::npos) << error_of(c);
}

TEST(DeepseekRope, YarnScalesAreDeepSeeksPublishedValues) {
  // The softmax scales the public configs give (../shared/design/facts-model-families.md B.3):
  // V2 / V2-Lite mscale_all_dim 0.707 -> 0.11472, V3 1.0 -> 0.13523, over (128 + 64)^-0.5.
  RopeScaling rs;
  rs.type = "yarn";
  rs.factor = 40;
  rs.mscale = rs.mscale_all_dim = 0.707;
  EXPECT_NEAR(yarn_softmax_factor(rs) / std::sqrt(192.0), 0.11472, 5e-6);
  EXPECT_DOUBLE_EQ(yarn_attention_factor(rs), 1.0);
  rs.mscale = rs.mscale_all_dim = 1.0;
  EXPECT_NEAR(yarn_softmax_factor(rs) / std::sqrt(192.0), 0.13523, 5e-6);
  rs.mscale_all_dim = 0.707;  // unequal: cos/sin carry the ratio
  EXPECT_NEAR(yarn_attention_factor(rs), (0.1 * std::log(40.0) + 1) / (0.0707 * std::log(40.0) + 1), 1e-12);
  RopeScaling none;
  EXPECT_EQ(yarn_softmax_factor(none), 1.0);
  EXPECT_EQ(yarn_attention_factor(none), 1.0);
}
