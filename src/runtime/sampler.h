// Sampling: penalties, then greedy or temperature -> top-k -> top-p -> min-p (transformers' order),
// from a seeded generator: same seed, same text.
#pragma once
#include <cstdint>
#include <vector>

#include "core/rng.h"

namespace kvad {

struct SamplingParams {
  float temperature = 0.8f;  // 0 = greedy
  int top_k = 0;             // 0 = off
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off
  float repetition_penalty = 1.0f;  // transformers' rule, over prompt + generated tokens
  float presence_penalty = 0.0f;    // OpenAI's rule, over generated tokens
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;
};

// Checks ranges and throws an error naming the bad parameter.
void validate(const SamplingParams& p);

// A distribution over token ids: the tokens a sampler may draw and their weights, summing to
// `total` (not necessarily 1). Either (weight, id) pairs, for a truncated distribution (top-k,
// top-p, min-p; a one-token list is a certain choice: greedy, or a draft that proposes without
// sampling), or, when temperature alone shapes it, a weight for every id (`dense`, with the sums
// of its runs of kernels::kWeightRun for draw()): 152k pairs built and walked per token were
// most of a temperature-only sample.
struct TokenDistribution {
  std::vector<std::pair<float, int32_t>> kept;  // f32: the weights are computed in f32
  std::vector<float> dense, run_sums;           // dense: weight by id; kept is then empty
  double total = 0;
  int32_t top = 0;  // dense: the most likely id (a draw that rounding carries past the end takes it)
  void certain(int32_t id) {
    dense.clear();
    kept.assign(1, {1.0f, id});
    total = 1;
    top = id;
  }
  double probability(int32_t id) const;
  // f(weight, id) for every token of non-zero weight, in id order when dense.
  template <typename F>
  void for_each(F&& f) const {
    if (dense.empty()) {
      for (const auto& [w, id] : kept) f(w, id);
      return;
    }
    for (size_t i = 0; i < dense.size(); i++)
      if (dense[i] > 0) f(dense[i], (int32_t)i);
  }
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  // Picks the next token. `context` = prompt + generated so far; `generated` = generated only.
  // Modifies logits in place (the penalised logits stay there). = prepare() then draw().
  int32_t sample(std::vector<float>& logits, const std::vector<int32_t>& context,
                 const std::vector<int32_t>& generated);
  // Penalties, temperature, top-k, min-p, top-p: the distribution the next draw takes a token from.
  void prepare(std::vector<float>& logits, const std::vector<int32_t>& context, const std::vector<int32_t>& generated);
  const TokenDistribution& prepared() const { return dist_; }
  int32_t draw();
  // Speculative sampling (Leviathan et al. 2023, Chen et al. 2023): `draft` was drawn from the
  // draft's distribution q. Keeps it with probability min(1, p(draft) / q(draft)), else draws
  // from the normalised residual max(0, p - q); the token returned is distributed exactly as the
  // prepared p. Greedy (p certain) keeps the draft iff it is p's choice, using no randomness.
  int32_t verify(int32_t draft, const TokenDistribution& q, bool& accepted);
  // log-probabilities of the (penalised, temperature-free) distribution, for logprobs reporting.
  static void log_softmax(const std::vector<float>& logits, std::vector<float>& out);

 private:
  void apply_penalties(std::vector<float>& logits, const std::vector<int32_t>& context,
                       const std::vector<int32_t>& generated);
  static bool by_logit(const std::vector<float>& logits, int32_t a, int32_t b);
  int64_t select_top_k(const std::vector<float>& logits, int64_t k);
  void keep_all(const int32_t* ids, const float* w, int64_t n, float floor);
  void keep_nucleus(const int32_t* ids, const float* w, int64_t n, double sum, float floor);
  SamplingParams p_;
  Rng rng_;
  // Buffers kept between tokens (a step allocates nothing once they have grown): candidate ids,
  // their weights, a gathered row, (logit, id) pairs to sort.
  std::vector<int32_t> index_;
  std::vector<float> weights_, vals_;
  std::vector<std::pair<float, int32_t>> cand_;
  std::vector<int32_t> marks_;  // apply_penalties(): per-token seen marks / counts, zero between calls
  TokenDistribution dist_;
  std::vector<double> residual_;  // verify(): q spread over the vocabulary, then p - q
};

}  // namespace kvad
