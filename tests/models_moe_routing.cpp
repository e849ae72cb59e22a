// Expert choice: each family's config.json routing keys, parsed by models/moe.cpp into one
// kernels::Routing, must choose the experts (in order) and the weights that transformers' rules
// give, computed by the peer's float64 numpy code (tools/make_routing_goldens.py): Qwen3-MoE
// with and without norm_topk_prob, DeepSeek-V2 greedy and group-limited (groups by their best),
// DeepSeek-V3 sigmoid + choice-only bias + groups by their two best + renormalisation.
#include <gtest/gtest.h>

#include <cmath>

#include "core/json.h"
#include "kernels/moe.h"
#include "models/moe.h"
#include "test_support.h"

using namespace kvad;

namespace {

MoeConfig parse_case(const Json& c, int64_t experts) {
  Json j = c["config"];
  const std::string arch = c["arch"];
  j["moe_intermediate_size"] = 32;
  if (arch == "Qwen3MoeForCausalLM") {
    j["num_experts"] = experts;
    return parse_qwen_moe_config(j, 1, arch);
  }
  j["n_routed_experts"] = experts;
  return parse_deepseek_moe_config(j, 1, arch == "DeepseekV3ForCausalLM", arch);
}

class Routing : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(Routing, ChoosesWhatTransformersChooses) {
  Json all = read_json_file(test::source_path("tests/golden/routing/routing.json"));
  const Json& c = all[GetParam()];
  const int64_t E = c["experts"];
  MoeConfig m = parse_case(c, E);
  EXPECT_EQ(m.score_bias, c.contains("score_bias"));
  std::vector<std::vector<float>> rows = c["logits"];
  std::vector<float> logits, bias;
  for (auto& r : rows) logits.insert(logits.end(), r.begin(), r.end());
  if (c.contains("score_bias")) bias = c["score_bias"].get<std::vector<float>>();
  const int64_t T = (int64_t)rows.size(), k = m.routing.top_k;
  std::vector<int32_t> ids((size_t)(T * k));
  std::vector<float> w((size_t)(T * k));
  kernels::route(logits.data(), T, E, bias.empty() ? nullptr : bias.data(), m.routing, ids.data(), w.data());
  for (int64_t t = 0; t < T; t++)
    for (int64_t j = 0; j < k; j++) {
      EXPECT_EQ(ids[(size_t)(t * k + j)], c["ids"][t][j].get<int32_t>()) << "token " << t << " choice " << j;
      EXPECT_NEAR(w[(size_t)(t * k + j)], c["weights"][t][j].get<double>(), 2e-6 * m.routing.scale)
          << "token " << t << " choice " << j;
    }
}

INSTANTIATE_TEST_SUITE_P(Rules, Routing,
                         ::testing::Values("qwen3_moe", "qwen3_moe_unnormalised", "deepseek_v2_greedy",
                                           "deepseek_v2_group", "deepseek_v3"));

TEST(RoutingConfig, BadFieldsAreNamed) {
  auto refused = [](Json j, bool v3, const std::string& field) {
    j["moe_intermediate_size"] = 32;
    try {
      parse_deepseek_moe_config(j, 4, v3, "cfg.json");
      ADD_FAILURE() << "accepted: " << j.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  refused({{"n_routed_experts", 8}, {"num_experts_per_tok", 9}}, false, "num_experts_per_tok");
  refused({{"n_routed_experts", 8}, {"num_experts_per_tok", 2}, {"topk_method", "group_limited_greedy"},
           {"n_group", 3}, {"topk_group", 1}}, false, "n_group");
  refused({{"n_routed_experts", 8}, {"num_experts_per_tok", 2}, {"topk_method", "noaux_tc"}, {"n_group", 2},
           {"topk_group", 1}}, false, "noaux_tc");
  refused({{"n_routed_experts", 8}, {"num_experts_per_tok", 2}, {"scoring_func", "tanh"}}, true, "scoring_func");
  refused({{"n_routed_experts", 2000}, {"num_experts_per_tok", 2}}, false, "experts");
}
