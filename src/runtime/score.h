// Scoring: how well a model predicts a text. ONE definition for the CLI (`kvad score`) and the
// server's scoring page: the text is tokenized without special tokens and cut into disjoint
// windows of `window` predicted tokens (each window starts fresh, as `kvad train` scores its
// validation part, and a shorter last window takes the rest), so every token after the first is
// predicted exactly once. Bits per character divide by the Unicode characters of the predicted
// tokens, bits per byte by their bytes (equal for ASCII text).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "runtime/engine.h"
#include "tokenizer/tokenizer.h"

namespace kvad {

// How far one engine's next-token distributions are from a reference engine's over the same text
// and windows (teacher-forced): KL(reference || engine) in nats per predicted token, and how often
// both put the same token first. What `kvad score --kl-vs-kv f32` reports for a q8 or bf16 cache.
struct Divergence {
  double kl_mean = 0, kl_p99 = 0, kl_max = 0;
  double same_top = 0;  // fraction of positions where both argmaxes agree
};

struct ScoreResult {
  int64_t tokens = 0, predicted = 0, chars = 0, bytes = 0, window = 0;
  double nll = 0;  // nats, summed over the predicted tokens
  double seconds = 0;
  std::optional<Divergence> vs_reference;  // when a reference engine was given
  double nll_per_token() const { return predicted ? nll / (double)predicted : 0; }
  double perplexity() const;
  double bits_per_token() const;
  double bits_per_char() const;
  double bits_per_byte() const;
};

// window <= 0: the engine's context. Throws when the text has fewer than two tokens; `cancelled`
// (polled between forwards) ends it with an error. With `reference` (the same model, run another
// way), every forward also runs there and vs_reference compares the two.
ScoreResult score_text(Engine& engine, const Tokenizer& tok, const std::string& text, int64_t window,
                       const std::function<bool()>& cancelled = {}, Engine* reference = nullptr);

}  // namespace kvad
