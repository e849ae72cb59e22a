#include "kernels/moe.h"

#include <cmath>

#include "core/error.h"

namespace kvad::kernels {

namespace {

constexpr int64_t kMaxExperts = 1024;

// The index of the largest of v[0..n) not yet taken; the lowest index wins a tie. -1 if none.
int64_t best_untaken(const float* v, int64_t n, const bool* taken) {
  int64_t best = -1;
  for (int64_t i = 0; i < n; i++)
    if (!taken[i] && (best < 0 || v[i] > v[best])) best = i;
  return best;
}

void router_scores(const float* logits, int64_t E, RouterScore kind, float* scores) {
  if (kind == RouterScore::Sigmoid) {
    for (int64_t e = 0; e < E; e++) scores[e] = 1.0f / (1.0f + std::exp(-logits[e]));
    return;
  }
  float mx = logits[0];
  for (int64_t e = 1; e < E; e++) mx = std::fmax(mx, logits[e]);
  double sum = 0;
  for (int64_t e = 0; e < E; e++) sum += scores[e] = std::exp(logits[e] - mx);
  for (int64_t e = 0; e < E; e++) scores[e] = (float)(scores[e] / sum);
}

// Sets choice[e] = 0 for the experts outside the r.top_groups best groups.
void limit_to_best_groups(float* choice, int64_t E, const Routing& r) {
  const int64_t G = r.n_groups, per = E / G;
  float group[kMaxExperts];
  bool taken[kMaxExperts] = {};
  for (int64_t g = 0; g < G; g++) {
    const float* c = choice + g * per;
    if (r.group_score == GroupScore::Max) {
      float m = c[0];
      for (int64_t i = 1; i < per; i++) m = std::fmax(m, c[i]);
      group[g] = m;
    } else {  // the sum of the two best (ties: both count)
      float a = -INFINITY, b = -INFINITY;
      for (int64_t i = 0; i < per; i++) {
        if (c[i] > a) b = a, a = c[i];
        else if (c[i] > b) b = c[i];
      }
      group[g] = per == 1 ? a : a + b;
    }
  }
  for (int i = 0; i < r.top_groups; i++) taken[best_untaken(group, G, taken)] = true;
  for (int64_t g = 0; g < G; g++)
    if (!taken[g])
      for (int64_t i = 0; i < per; i++) choice[g * per + i] = 0.0f;
}

}  // namespace

void route(const float* logits, int64_t n, int64_t E, const float* score_bias, const Routing& r, int32_t* ids,
           float* weights) {
  if (E < 1 || E > kMaxExperts || r.top_k < 1 || r.top_k > E)
    fail("moe routing: {} experts with top-k {} (at most {} experts)", E, r.top_k, kMaxExperts);
  if (r.n_groups < 1 || E % r.n_groups || r.top_groups < 1 || r.top_groups > r.n_groups)
    fail("moe routing: {} experts in {} groups, {} of them chosen", E, r.n_groups, r.top_groups);
  float scores[kMaxExperts], choice[kMaxExperts];
  for (int64_t t = 0; t < n; t++) {
    router_scores(logits + t * E, E, r.score, scores);
    for (int64_t e = 0; e < E; e++) choice[e] = scores[e] + (score_bias ? score_bias[e] : 0.0f);
    if (r.n_groups > 1) limit_to_best_groups(choice, E, r);
    bool taken[kMaxExperts] = {};
    int32_t* id = ids + t * r.top_k;
    float* w = weights + t * r.top_k;
    double sum = 0;
    for (int j = 0; j < r.top_k; j++) {
      int64_t e = best_untaken(choice, E, taken);  // never -1: top_k <= E
      taken[e] = true;
      id[j] = (int32_t)e;
      sum += w[j] = scores[e];
    }
    double norm = r.renormalize ? 1.0 / (sum + r.norm_epsilon) : 1.0;
    for (int j = 0; j < r.top_k; j++) w[j] = (float)(w[j] * norm * r.scale);
  }
}

}  // namespace kvad::kernels
