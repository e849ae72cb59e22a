// Mixture-of-experts routing: a router's logits for one token -> the experts it runs and the
// weight each one's output gets. One function for every family's rule (transformers' modeling
// files, ../shared/peer/ref_forward.py `route`):
//   Qwen3-MoE, Qwen3-Next   softmax, top-k, optionally renormalised
//   DeepSeek-V2             softmax, top-k (greedy) or top-k within the best groups ranked by their
//                           highest score (group_limited_greedy), x routed_scaling_factor
//   DeepSeek-V3             sigmoid; a correction bias added for the CHOICE only; groups ranked by
//                           the sum of their two best; renormalised (+1e-20), x routed_scaling_factor
// Experts outside the chosen groups count as score 0.0 (transformers' masked_fill), not -inf.
// Ties go to the lower expert id (a stable sort, as numpy's and torch's top-k on CPU).
#pragma once
#include <cstdint>

namespace kvad::kernels {

enum class RouterScore : uint8_t { Softmax, Sigmoid };
enum class GroupScore : uint8_t { Max, SumOfTop2 };

struct Routing {
  RouterScore score = RouterScore::Softmax;
  int top_k = 1;
  int n_groups = 1, top_groups = 1;  // n_groups 1: no group limit
  GroupScore group_score = GroupScore::Max;
  bool renormalize = false;  // the chosen weights divided by their sum
  float norm_epsilon = 0;    // added to that sum (V3's 1e-20)
  float scale = 1;           // routed_scaling_factor
};

// For each of n tokens: ids[t * top_k + j] and weights[t * top_k + j] of its chosen experts, in
// choice order. logits [n, n_experts]; score_bias [n_experts] or null. Needs n_experts <= 1024.
void route(const float* logits, int64_t n, int64_t n_experts, const float* score_bias, const Routing& r, int32_t* ids,
           float* weights);

}  // namespace kvad::kernels
