#include "models/moe.h"

#include <algorithm>
#include <tuple>

#include "core/error.h"
#include "models/config_parse.h"

namespace kvad {

MoeConfig parse_qwen_moe_config(const Json& j, int64_t n_layers, const std::string& what) {
  MoeConfig m;
  m.n_experts = json_int_or(j, "num_experts", 0, what);
  if (m.n_experts == 0) return m;
  m.expert_intermediate = positive_field(j, "moe_intermediate_size", what);
  m.routing.score = kernels::RouterScore::Softmax;
  m.routing.top_k = (int)std::min<int64_t>(positive_field(j, "num_experts_per_tok", what), 1 << 20);
  m.routing.renormalize = json_bool_or(j, "norm_topk_prob", false, what);
  int64_t step = j.contains("decoder_sparse_step") && !j["decoder_sparse_step"].is_null()
                     ? positive_field(j, "decoder_sparse_step", what)
                     : 1;
  m.sparse.assign((size_t)std::clamp<int64_t>(n_layers, 0, ConfigBounds::kMaxLayers), false);
  for (size_t l = 0; l < m.sparse.size(); l++) m.sparse[l] = (int64_t)(l + 1) % step == 0;
  if (auto it = j.find("mlp_only_layers"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) fail("{}: mlp_only_layers must be a list of layer numbers", what);
    for (const Json& x : *it) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= n_layers)
        fail("{}: mlp_only_layers holds '{}', not a layer number below {}", what, json_snippet(x), n_layers);
      m.sparse[(size_t)x.get<int64_t>()] = false;
    }
  }
  validate_moe_config(m, n_layers, what);
  return m;
}

MoeConfig parse_deepseek_moe_config(const Json& j, int64_t n_layers, bool v3, const std::string& what) {
  MoeConfig m;
  if (!j.contains("n_routed_experts") || j["n_routed_experts"].is_null()) return m;
  m.n_experts = positive_field(j, "n_routed_experts", what);
  m.expert_intermediate = positive_field(j, "moe_intermediate_size", what);
  m.routing.top_k = (int)std::min<int64_t>(positive_field(j, "num_experts_per_tok", what), 1 << 20);
  int64_t shared = json_int_or(j, "n_shared_experts", 0, what);
  if (shared < 0 || shared > 1024) fail("{}: n_shared_experts {} is out of range", what, shared);
  m.shared_intermediate = shared * m.expert_intermediate;
  const int64_t first_dense = json_int_or(j, "first_k_dense_replace", 0, what),
                freq = json_int_or(j, "moe_layer_freq", 1, what);
  if (first_dense < 0 || freq < 1) fail("{}: first_k_dense_replace must be >= 0 and moe_layer_freq >= 1", what);
  m.sparse.assign((size_t)std::clamp<int64_t>(n_layers, 0, ConfigBounds::kMaxLayers), false);
  for (size_t l = 0; l < m.sparse.size(); l++) m.sparse[l] = (int64_t)l >= first_dense && (int64_t)l % freq == 0;

  auto& r = m.routing;
  const std::string method = json_str_or(j, "topk_method", v3 ? "noaux_tc" : "greedy", what),
                    scoring = json_str_or(j, "scoring_func", v3 ? "sigmoid" : "softmax", what);
  if (scoring != "softmax" && scoring != "sigmoid")
    fail("{}: scoring_func '{}' is not supported (softmax, sigmoid)", what, scoring);
  r.score = scoring == "sigmoid" ? kernels::RouterScore::Sigmoid : kernels::RouterScore::Softmax;
  r.scale = (float)json_num_or(j, "routed_scaling_factor", v3 ? 2.5 : 1.0, what);  // transformers' defaults
  if (method == "group_limited_greedy" || method == "noaux_tc") {
    r.n_groups = (int)std::min<int64_t>(positive_field(j, "n_group", what), 1 << 20);
    r.top_groups = (int)std::min<int64_t>(positive_field(j, "topk_group", what), 1 << 20);
    // V2 ranks a group by its best expert; V3 by the sum of its two best (transformers' both).
    r.group_score = method == "noaux_tc" ? kernels::GroupScore::SumOfTop2 : kernels::GroupScore::Max;
  } else if (method != "greedy") {
    fail("{}: topk_method '{}' is not supported (greedy, group_limited_greedy, noaux_tc)", what, method);
  }
  if (method == "noaux_tc") {
    if (!v3) fail("{}: topk_method noaux_tc is DeepSeek-V3's (architectures says V2)", what);
    m.score_bias = true;
  }
  if (v3) {  // V2's transformers code never renormalises, whatever norm_topk_prob says
    r.renormalize = json_bool_or(j, "norm_topk_prob", true, what);
    r.norm_epsilon = 1e-20f;
  }
  validate_moe_config(m, n_layers, what);
  return m;
}

void validate_moe_config(const MoeConfig& m, int64_t n_layers, const std::string& what) {
  if (m.n_experts == 0) return;
  if (m.n_experts < 0 || m.n_experts > 1024) fail("{}: {} experts (kvad routes at most 1024)", what, m.n_experts);
  if (m.routing.top_k < 1 || m.routing.top_k > m.n_experts)
    fail("{}: num_experts_per_tok ({}) must be between 1 and the number of experts ({})", what, m.routing.top_k,
         m.n_experts);
  if (m.expert_intermediate <= 0 || m.expert_intermediate > ConfigBounds::kMaxIntermediate)
    fail("{}: moe_intermediate_size {} is out of range", what, m.expert_intermediate);
  const auto& r = m.routing;
  if (r.n_groups < 1 || m.n_experts % r.n_groups || r.top_groups < 1 || r.top_groups > r.n_groups)
    fail("{}: {} experts cannot be split into n_group = {} groups with topk_group = {}", what, m.n_experts, r.n_groups,
         r.top_groups);
  if (r.group_score == kernels::GroupScore::SumOfTop2 && r.n_groups > 1 && m.n_experts / r.n_groups < 2)
    fail("{}: groups of one expert cannot be ranked by their two best", what);
  if (!(r.scale > 0) || r.scale > 1e6) fail("{}: routed_scaling_factor {} must be positive", what, r.scale);
  if ((int64_t)m.sparse.size() != n_layers) fail("{}: internal: MoE layer list of {} layers", what, m.sparse.size());
}

void moe_tensors(const ModelConfig& c, int64_t l, MoeWeights& w, TensorList& t) {
  const int64_t H = c.hidden, E = c.moe.n_experts, I = c.moe.expert_intermediate;
  const std::string p = "model.layers." + std::to_string(l) + ".mlp.", g = "blk." + std::to_string(l) + ".";
  t.push_back(vector_tensor(p + "gate.weight", g + "ffn_gate_inp.weight", {E, H}, TensorInit::Router, &w.router));
  if (c.moe.score_bias)
    t.push_back(vector_tensor(p + "gate.e_score_correction_bias", g + "exp_probs_b.bias", {E}, TensorInit::Normal,
                              &w.score_bias));
  w.experts.resize((size_t)E);
  const double share = (double)c.moe.routing.top_k / (double)E;
  for (int64_t e = 0; e < E; e++) {
    Expert& x = w.experts[(size_t)e];
    const std::string ep = p + "experts." + std::to_string(e) + ".";
    for (auto [hf, gguf, rows, cols, to] : {std::tuple{"gate_proj", "ffn_gate_exps", I, H, &x.gate},
                                            std::tuple{"up_proj", "ffn_up_exps", I, H, &x.up},
                                            std::tuple{"down_proj", "ffn_down_exps", H, I, &x.down}}) {
      t.push_back(matrix_tensor(ep + hf + ".weight", g + gguf + ".weight", rows, cols, to));
      t.back().gguf_expert = e;
      t.back().read_share = share;
    }
  }
}

}  // namespace kvad
