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

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  // Picks the next token. `context` = prompt + generated so far; `generated` = generated only.
  // Modifies logits in place.
  int32_t sample(std::vector<float>& logits, const std::vector<int32_t>& context,
                 const std::vector<int32_t>& generated);
  // log-probabilities of the (penalised, temperature-free) distribution, for logprobs reporting.
  static void log_softmax(const std::vector<float>& logits, std::vector<float>& out);

 private:
  void apply_penalties(std::vector<float>& logits, const std::vector<int32_t>& context,
                       const std::vector<int32_t>& generated) const;
  SamplingParams p_;
  Rng rng_;
  std::vector<std::pair<float, int32_t>> cand_;
  std::vector<float> weights_;
  std::vector<std::pair<double, int32_t>> kept_;
};

}  // namespace kvad
