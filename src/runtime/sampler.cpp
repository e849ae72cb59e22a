#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "kernels/sampling.h"

namespace kvad {

void validate(const SamplingParams& p) {
  if (!(p.temperature >= 0) || p.temperature > 100) fail("temperature must be between 0 and 100, got {}", p.temperature);
  if (p.top_k < 0) fail("top_k must be >= 0, got {}", p.top_k);
  if (!(p.top_p > 0 && p.top_p <= 1)) fail("top_p must be in (0, 1], got {}", p.top_p);
  if (!(p.min_p >= 0 && p.min_p <= 1)) fail("min_p must be in [0, 1], got {}", p.min_p);
  if (!(p.repetition_penalty > 0)) fail("repetition_penalty must be > 0, got {}", p.repetition_penalty);
  if (!(p.presence_penalty >= -2 && p.presence_penalty <= 2))
    fail("presence_penalty must be between -2 and 2, got {}", p.presence_penalty);
  if (!(p.frequency_penalty >= -2 && p.frequency_penalty <= 2))
    fail("frequency_penalty must be between -2 and 2, got {}", p.frequency_penalty);
}

Sampler::Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) { validate(p); }

// Penalties touch only the tokens seen: per-token marks kept zero between calls (set for the
// context's tokens, cleared again after), not a vocabulary-sized pass or allocation per token.
void Sampler::apply_penalties(std::vector<float>& logits, const std::vector<int32_t>& context,
                              const std::vector<int32_t>& generated) {
  const int32_t V = (int32_t)logits.size();
  if (p_.repetition_penalty != 1.0f) {
    // transformers: each distinct token seen once, positive logits divided, negative multiplied.
    marks_.resize((size_t)V);
    for (int32_t t : context)
      if (t >= 0 && t < V && !marks_[(size_t)t]) {
        marks_[(size_t)t] = 1;
        float& l = logits[(size_t)t];
        l = l > 0 ? l / p_.repetition_penalty : l * p_.repetition_penalty;
      }
    for (int32_t t : context)
      if (t >= 0 && t < V) marks_[(size_t)t] = 0;
  }
  if (p_.presence_penalty != 0 || p_.frequency_penalty != 0) {
    // OpenAI: logit -= count * frequency_penalty + (count > 0) * presence_penalty.
    marks_.resize((size_t)V);
    for (int32_t t : generated)
      if (t >= 0 && t < V) marks_[(size_t)t]++;
    for (int32_t t : generated)
      if (t >= 0 && t < V && marks_[(size_t)t]) {
        logits[(size_t)t] -= (float)marks_[(size_t)t] * p_.frequency_penalty + p_.presence_penalty;
        marks_[(size_t)t] = 0;
      }
  }
}

double TokenDistribution::probability(int32_t id) const {
  if (!(total > 0)) return 0;
  if (!dense.empty()) return id >= 0 && (size_t)id < dense.size() ? dense[(size_t)id] / total : 0;
  for (const auto& [w, t] : kept)
    if (t == id) return w / total;
  return 0;
}

int32_t Sampler::sample(std::vector<float>& logits, const std::vector<int32_t>& context,
                        const std::vector<int32_t>& generated) {
  prepare(logits, context, generated);
  return draw();
}

// The passes over the vocabulary are kernels (kernels/sampling.h): this runs on the calling thread
// alone between two forwards, once per sequence in a step, so a scalar pass over 152k logits
// was a tenth to a third of a decode step (docs/kernels.md, "Sampling").
void Sampler::prepare(std::vector<float>& logits, const std::vector<int32_t>& context,
                      const std::vector<int32_t>& generated) {
  apply_penalties(logits, context, generated);
  const int64_t V = (int64_t)logits.size();
  const int64_t top = kernels::argmax(logits.data(), V);
  // z = logit / temperature, as a product (the order of the logits is the order of the z).
  const float scale = p_.temperature > 0 ? 1.0f / p_.temperature : 0.0f;
  const float mx = logits[(size_t)top] * scale;
  if (p_.temperature == 0 || !std::isfinite(mx)) {  // greedy, or nothing finite to weigh
    dist_.certain((int32_t)top);
    return;
  }
  // Weights exp(z - max z) are in (0, 1], the top token's 1. min-p keeps tokens whose
  // probability is at least min_p x the top one's: a weight >= min_p. Without min-p every token
  // of non-zero weight (a weight under 1.2e-38 is 0: kernels::exp_weights).
  const float floor = p_.min_p > 0 ? p_.min_p : std::numeric_limits<float>::denorm_min();
  if (p_.top_k > 0 && p_.top_k < V) {
    const int64_t k = select_top_k(logits, p_.top_k);
    std::sort(index_.begin(), index_.begin() + k, [&](int32_t a, int32_t b) { return by_logit(logits, a, b); });
    vals_.resize((size_t)k);
    for (int64_t j = 0; j < k; j++) vals_[(size_t)j] = logits[(size_t)index_[(size_t)j]];
    weights_.resize((size_t)k);
    const double sum = kernels::exp_weights(vals_.data(), k, scale, mx, weights_.data());
    if (p_.top_p >= 1) keep_all(index_.data(), weights_.data(), k, floor);
    else keep_nucleus(index_.data(), weights_.data(), k, sum, floor);
    return;
  }
  if (p_.top_p >= 1 && p_.min_p <= 0) {  // temperature alone: every weight, by id
    dist_.kept.clear();
    dist_.dense.resize((size_t)V);
    dist_.run_sums.resize((size_t)((V + kernels::kWeightRun - 1) / kernels::kWeightRun));
    dist_.total = kernels::exp_weights(logits.data(), V, scale, mx, dist_.dense.data(), dist_.run_sums.data());
    dist_.top = (int32_t)top;
    return;
  }
  weights_.resize((size_t)V);
  index_.resize((size_t)V);
  const double sum = kernels::exp_weights(logits.data(), V, scale, mx, weights_.data());
  if (p_.top_p >= 1) {  // no ordering needed: the weights in id order, unnormalised
    const int64_t n = kernels::select_at_least(weights_.data(), V, floor, index_.data());
    vals_.resize((size_t)n);
    for (int64_t j = 0; j < n; j++) vals_[(size_t)j] = weights_[(size_t)index_[(size_t)j]];
    keep_all(index_.data(), vals_.data(), n, floor);
    return;
  }
  // top-p takes the largest first, until their mass reaches top_p. Sorting 152k tokens for a
  // nucleus of tens is the cost to avoid: the tokens with z >= max z - c are a prefix of that
  // order whatever c is, so widen c in steps until that prefix holds the mass (or every token
  // that passes min-p), and sort only it. Steps of 2 (a factor e^2 in weight): doubling c
  // overshot into tens of thousands of tokens to sort on flat distributions.
  const double need = p_.top_p * sum * (1 + 1e-9);  // the walk below sums in another order
  const float widest = p_.min_p > 0 ? 1 - std::log(p_.min_p) : INFINITY;
  int64_t n = 0;
  for (float c = 2;; c += 2) {
    const bool all = c > 90 || c >= widest;  // past 87.3 every further weight is 0
    const float t = all ? -INFINITY : (mx - c) / scale;
    n = kernels::select_at_least(logits.data(), V, t, index_.data());
    double mass = 0;
    for (int64_t j = 0; j < n; j++) mass += weights_[(size_t)index_[(size_t)j]];
    if (all || mass >= need) break;
  }
  cand_.resize((size_t)n);
  for (int64_t j = 0; j < n; j++) cand_[(size_t)j] = {logits[(size_t)index_[(size_t)j]], index_[(size_t)j]};
  std::sort(cand_.begin(), cand_.end(), [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  vals_.resize((size_t)n);
  for (int64_t j = 0; j < n; j++) {
    index_[(size_t)j] = cand_[(size_t)j].second;
    vals_[(size_t)j] = weights_[(size_t)cand_[(size_t)j].second];
  }
  keep_nucleus(index_.data(), vals_.data(), n, sum, floor);
}

bool Sampler::by_logit(const std::vector<float>& logits, int32_t a, int32_t b) {
  const float la = logits[(size_t)a], lb = logits[(size_t)b];
  return la > lb || (la == lb && a < b);
}

// The k best by (logit, then lower id) into index_[0, k): chunks of the vocabulary are filtered
// against the k-th best so far, so after the first chunk only the few that could still enter are
// looked at (a heap or nth_element over every token cost 1.6 ms at k = 40).
int64_t Sampler::select_top_k(const std::vector<float>& logits, int64_t k) {
  const int64_t V = (int64_t)logits.size(), chunk = 4096;
  index_.resize((size_t)V);
  auto order = [&](int32_t a, int32_t b) { return by_logit(logits, a, b); };
  float t = -INFINITY;
  int64_t n = 0;
  for (int64_t s = 0; s < V; s += chunk) {
    const int64_t len = std::min(chunk, V - s);
    const int64_t m = kernels::select_at_least(logits.data() + s, len, t, index_.data() + n);
    for (int64_t j = n; j < n + m; j++) index_[(size_t)j] += (int32_t)s;
    n += m;
    if (n > 2 * k + chunk || (s + len == V && n > k)) {
      // The k best of what is held; a later token equal to the k-th is behind it (a higher id).
      std::nth_element(index_.begin(), index_.begin() + (k - 1), index_.begin() + n, order);
      t = logits[(size_t)index_[(size_t)(k - 1)]];
      n = k;
    }
  }
  return n;  // < k only when NaNs were left out
}

// Every candidate whose weight passes the floor, in the given order; weights unnormalised.
void Sampler::keep_all(const int32_t* ids, const float* w, int64_t n, float floor) {
  dist_.dense.clear();
  std::vector<std::pair<float, int32_t>>& kept = dist_.kept;
  kept.clear();
  double total = 0;
  for (int64_t j = 0; j < n; j++)
    if (w[j] >= floor) {
      kept.push_back({w[j], ids[j]});
      total += w[j];
    }
  dist_.total = total;
}

// The nucleus: candidates in decreasing order until their probability (weight / sum over the
// candidates of top-k, or the whole vocabulary) reaches top_p, stopping early at the min-p floor.
void Sampler::keep_nucleus(const int32_t* ids, const float* w, int64_t n, double sum, float floor) {
  dist_.dense.clear();
  std::vector<std::pair<float, int32_t>>& kept = dist_.kept;
  kept.clear();
  double cum = 0;
  for (int64_t j = 0; j < n; j++) {
    if (!kept.empty() && w[j] < floor) break;
    const double prob = w[j] / sum;
    kept.push_back({(float)prob, ids[j]});
    cum += prob;
    if (cum >= p_.top_p) break;
  }
  dist_.total = cum;
}

int32_t Sampler::draw() {
  const auto& kept = dist_.kept;
  if (dist_.dense.empty() && kept.size() == 1) return kept[0].second;
  double r = rng_.uniform() * dist_.total;
  if (!dist_.dense.empty()) {  // find the run, then the token within it
    const std::vector<float>& w = dist_.dense;
    size_t run = 0;
    for (; run + 1 < dist_.run_sums.size() && r > dist_.run_sums[run]; run++) r -= dist_.run_sums[run];
    for (size_t i = run * (size_t)kernels::kWeightRun; i < w.size(); i++)
      if (w[i] > 0 && (r -= w[i]) <= 0) return (int32_t)i;
    return dist_.top;  // rounding carried r past the last weight
  }
  int32_t last = kept[0].second;
  for (const auto& [w, id] : kept) {
    if (w == 0) continue;
    last = id;
    if ((r -= w) <= 0) return id;
  }
  return last;
}

int32_t Sampler::verify(int32_t draft, const TokenDistribution& q, bool& accepted) {
  const double p_draft = dist_.probability(draft), q_draft = q.probability(draft);
  accepted = p_draft > 0 && (p_draft >= q_draft || rng_.uniform() * q_draft < p_draft);
  if (accepted) return draft;
  // Rejected: the residual max(0, p - q), over p's support (outside it the residual is 0).
  int32_t top = 0;
  dist_.for_each([&](float, int32_t id) { top = std::max(top, id); });
  residual_.assign((size_t)top + 1, 0.0);
  if (q.total > 0)
    q.for_each([&](float w, int32_t id) {
      if (id <= top) residual_[(size_t)id] = w / q.total;
    });
  auto residual = [&](float w, int32_t id) { return std::max(0.0, w / dist_.total - residual_[(size_t)id]); };
  double total = 0;
  dist_.for_each([&](float w, int32_t id) { total += residual(w, id); });
  if (!(total > 0)) return draw();  // p == q up to rounding: rejection had probability ~0
  double r = rng_.uniform() * total;
  int32_t chosen = -1, last = top;
  dist_.for_each([&](float w, int32_t id) {
    const double d = residual(w, id);
    if (chosen >= 0 || d <= 0) return;
    last = id;
    if ((r -= d) <= 0) chosen = id;
  });
  return chosen >= 0 ? chosen : last;
}

void Sampler::log_softmax(const std::vector<float>& logits, std::vector<float>& out) {
  const int64_t V = (int64_t)logits.size();
  const float mx = logits[(size_t)kernels::argmax(logits.data(), V)];
  out.resize(logits.size());
  const float lse = mx + (float)std::log(kernels::exp_weights(logits.data(), V, 1.0f, mx, out.data()));
  for (size_t i = 0; i < logits.size(); i++) out[i] = logits[i] - lse;
}

}  // namespace kvad
