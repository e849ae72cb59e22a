#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

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

void Sampler::apply_penalties(std::vector<float>& logits, const std::vector<int32_t>& context,
                              const std::vector<int32_t>& generated) const {
  const int32_t V = (int32_t)logits.size();
  if (p_.repetition_penalty != 1.0f) {
    // transformers: each distinct token seen once, positive logits divided, negative multiplied.
    std::vector<bool> seen((size_t)V);
    for (int32_t t : context)
      if (t >= 0 && t < V && !seen[(size_t)t]) {
        seen[(size_t)t] = true;
        float& l = logits[(size_t)t];
        l = l > 0 ? l / p_.repetition_penalty : l * p_.repetition_penalty;
      }
  }
  if (p_.presence_penalty != 0 || p_.frequency_penalty != 0) {
    // OpenAI: logit -= count * frequency_penalty + (count > 0) * presence_penalty.
    std::vector<int32_t> counts;
    for (int32_t t : generated)
      if (t >= 0 && t < V) {
        if (counts.empty()) counts.assign((size_t)V, 0);
        counts[(size_t)t]++;
      }
    if (!counts.empty())
      for (int32_t t = 0; t < V; t++)
        if (counts[(size_t)t])
          logits[(size_t)t] -= (float)counts[(size_t)t] * p_.frequency_penalty + p_.presence_penalty;
  }
}

double TokenDistribution::probability(int32_t id) const {
  for (const auto& [w, t] : kept)
    if (t == id) return total > 0 ? w / total : 0;
  return 0;
}

int32_t Sampler::sample(std::vector<float>& logits, const std::vector<int32_t>& context,
                        const std::vector<int32_t>& generated) {
  prepare(logits, context, generated);
  return draw();
}

void Sampler::prepare(std::vector<float>& logits, const std::vector<int32_t>& context,
                      const std::vector<int32_t>& generated) {
  apply_penalties(logits, context, generated);
  const int32_t V = (int32_t)logits.size();
  if (p_.temperature == 0) {
    dist_.certain((int32_t)(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    return;
  }
  cand_.resize((size_t)V);
  for (int32_t i = 0; i < V; i++) cand_[(size_t)i] = {logits[(size_t)i] / p_.temperature, i};
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  if (p_.top_k > 0 && p_.top_k < V) {
    std::nth_element(cand_.begin(), cand_.begin() + p_.top_k, cand_.end(), by_logit);
    cand_.resize((size_t)p_.top_k);
  }
  float mx = -INFINITY;
  for (auto& c : cand_) mx = std::max(mx, c.first);
  // min-p keeps tokens whose probability is at least min_p x the top one's: a threshold on logits.
  float floor = p_.min_p > 0 ? mx + std::log(p_.min_p) : -INFINITY;
  // The buffers are members: a step of many sequences allocates nothing here.
  std::vector<std::pair<double, int32_t>>& kept = dist_.kept;
  kept.clear();
  if (p_.top_p >= 1) {  // no ordering needed: unnormalised weights exp(l - max), in candidate order
    double total = 0;
    for (const auto& [l, id] : cand_)
      if (l >= floor) {
        double w = std::exp(l - mx);  // one exp in float per candidate, summed in double
        kept.push_back({w, id});
        total += w;
      }
    dist_.total = total;
    return;
  }
  double sum = 0;
  for (const auto& c : cand_) sum += std::exp(c.first - mx);
  // top-p needs the largest first: a heap yields them without sorting the whole vocabulary.
  double cum = 0;
  auto heap_cmp = [&](const auto& a, const auto& b) { return by_logit(b, a); };
  std::make_heap(cand_.begin(), cand_.end(), heap_cmp);
  size_t end = cand_.size();
  while (end > 0) {
    std::pop_heap(cand_.begin(), cand_.begin() + (ptrdiff_t)end, heap_cmp);
    end--;
    if (!kept.empty() && cand_[end].first < floor) break;
    double prob = std::exp((double)cand_[end].first - mx) / sum;
    kept.push_back({prob, cand_[end].second});
    cum += prob;
    if (cum >= p_.top_p) break;
  }
  dist_.total = cum;
}

int32_t Sampler::draw() {
  const auto& kept = dist_.kept;
  if (kept.size() == 1) return kept[0].second;
  double r = rng_.uniform() * dist_.total;
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
  for (const auto& [w, id] : dist_.kept) top = std::max(top, id);
  residual_.assign((size_t)top + 1, 0.0);
  for (const auto& [w, id] : q.kept)
    if (id <= top && q.total > 0) residual_[(size_t)id] = w / q.total;
  double total = 0;
  for (const auto& [w, id] : dist_.kept) total += std::max(0.0, w / dist_.total - residual_[(size_t)id]);
  if (!(total > 0)) return draw();  // p == q up to rounding: rejection had probability ~0
  double r = rng_.uniform() * total;
  int32_t last = dist_.kept[0].second;
  for (const auto& [w, id] : dist_.kept) {
    double d = std::max(0.0, w / dist_.total - residual_[(size_t)id]);
    if (d <= 0) continue;
    last = id;
    if ((r -= d) <= 0) return id;
  }
  return last;
}

void Sampler::log_softmax(const std::vector<float>& logits, std::vector<float>& out) {
  float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp((double)l - mx);
  float lse = mx + (float)std::log(sum);
  out.resize(logits.size());
  for (size_t i = 0; i < logits.size(); i++) out[i] = logits[i] - lse;
}

}  // namespace kvad
