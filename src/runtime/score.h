// Scoring: how well a model predicts a text. ONE definition for the CLI (`kvad score`) and the
// server's scoring page: the text is tokenized without special tokens and cut into disjoint
// windows of `window` predicted tokens (each window starts fresh, as `kvad train` scores its
// validation part, and a shorter last window takes the rest), so every token after the first is
// predicted exactly once. Bits per character divide by the Unicode characters of the predicted
// tokens, bits per byte by their bytes (equal for ASCII text).
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "runtime/engine.h"
#include "tokenizer/tokenizer.h"

namespace kvad {

struct ScoreResult {
  int64_t tokens = 0, predicted = 0, chars = 0, bytes = 0, window = 0;
  double nll = 0;  // nats, summed over the predicted tokens
  double seconds = 0;
  double nll_per_token() const { return predicted ? nll / (double)predicted : 0; }
  double perplexity() const;
  double bits_per_token() const;
  double bits_per_char() const;
  double bits_per_byte() const;
};

// window <= 0: the engine's context. Throws when the text has fewer than two tokens; `cancelled`
// (polled between forwards) ends it with an error.
ScoreResult score_text(Engine& engine, const Tokenizer& tok, const std::string& text, int64_t window,
                       const std::function<bool()>& cancelled = {});

}  // namespace kvad
