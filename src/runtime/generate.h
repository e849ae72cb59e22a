// The generation loop: prefix reuse, prefill, then sample -> stream -> stop, over a Session.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "grammar/matcher.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "runtime/speculative.h"
#include "tokenizer/tokenizer.h"

namespace kvad {

struct GenerateOptions {
  SamplingParams sampling;
  int64_t max_tokens = 256;
  std::vector<std::string> stop;      // stop strings (not included in the output)
  std::vector<int32_t> stop_ids;      // EOS ids (from generation_config / the tokenizer)
  bool reuse_prefix = true;
  // >= 0: each TokenEvent carries the chosen token's log-probability and this many most likely
  // alternatives (of the penalised, temperature-free distribution, as OpenAI reports them).
  int top_logprobs = -1;
  // Grammar-constrained decoding (docs/grammar.md): every sampled token keeps the text a prefix
  // of the grammar's language, EOS is allowed only once it is complete, and generation ends
  // ("stop") when nothing else can follow. Empty = free text.
  grammar::Constraint constraint;
  // The tokenizer's vocabulary for the constraint (grammar_vocab()): built on first use when null,
  // which costs a vocabulary's worth of work; a server builds it once per model.
  std::shared_ptr<const grammar::TokenTrie> constraint_vocab;
  // Speculative decoding (runtime/speculative.h): off unless a draft source is set.
  SpeculativeOptions speculative;
};

// The token trie a constraint masks over: every token's bytes, special tokens never allowed,
// `eos` allowed when the grammar is complete.
std::shared_ptr<const grammar::TokenTrie> grammar_vocab(const Tokenizer& tok, const std::vector<int32_t>& eos);

struct TokenEvent {
  int32_t choice = 0;  // which of a request's n choices (the engine's n > 1)
  int32_t id = -1;
  std::string text;  // text that became final with this token (complete UTF-8, may be empty)
  float logprob = 0;  // when GenerateOptions::top_logprobs >= 0
  std::vector<std::pair<int32_t, float>> top;  // (id, logprob), most likely first
};

struct GenerateResult {
  int32_t choice = 0;  // which of a request's n choices
  std::string text;
  std::vector<int32_t> tokens;
  int64_t prompt_tokens = 0, cached_tokens = 0;
  double queue_seconds = 0;  // submitted -> first scheduled (the engine's wait queue)
  double prefill_seconds = 0, decode_seconds = 0;
  std::string finish_reason;  // "stop" (EOS or stop string), "length", "cancelled"
  int64_t context_full = 0;   // "length" because the context (of this many tokens) filled, not max_tokens
  int64_t draft_tokens = 0, draft_accepted = 0;  // speculative decoding: drafts verified, and kept

  double prefill_tok_s() const;
  double decode_tok_s() const;
};

// Holds back text that could still become a stop string; finds one when it appears.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  // Adds text; returns what is safe to emit now. Sets stopped() when a stop string completed
  // (the stop string and anything after it are dropped).
  std::string push(const std::string& text);
  std::string flush();  // at the end: whatever was held back
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

// The per-token half of generation, shared by generate() (one sequence over a Session) and the
// engine's step loop (many sequences in one forward): logits row -> sampled token -> TokenEvent,
// with stop strings, end-of-sequence ids, max_tokens and logprobs. Each sequence owns one, with
// its own seeded sampler: same seed, same text, whatever else shares the batch.
class TokenGenerator {
 public:
  TokenGenerator(const Tokenizer& tok, const std::vector<int32_t>& prompt, const GenerateOptions& opts);
  // Samples the next token from logits[vocab] (modified in place by the penalties). Fills `ev`
  // and returns true when generation ends with this token (finish reason set).
  bool next(const float* logits, int64_t vocab, TokenEvent& ev);
  // Speculative decoding: the same, but the token comes from verifying `draft` (drawn from the
  // draft's distribution q) against this row's distribution (Sampler::verify); `accepted` says
  // whether the draft was kept. Output is distributed exactly as next()'s; greedy, identical.
  bool next_verified(const float* logits, int64_t vocab, int32_t draft, const TokenDistribution& q, TokenEvent& ev,
                     bool& accepted);
  // After the last token (of any finish reason but "stop"): text held back by the decoder or a
  // partial stop string, as a final event with id -1 (empty text = nothing to send).
  std::string flush();
  void set_finish(const std::string& reason) { result_.finish_reason = reason; }
  void set_context_full(int64_t ctx) { result_.context_full = ctx; }
  bool finished() const { return done_; }
  const std::vector<int32_t>& generated() const { return result_.tokens; }
  GenerateResult& result() { return result_; }

 private:
  void prepare(const float* logits, int64_t vocab);  // mask, penalties, filters: sampler_ holds the distribution
  bool emit(int32_t id, TokenEvent& ev);             // the chosen token: text, stops, logprobs, end
  GenerateOptions opts_;
  Sampler sampler_;
  StreamDecoder decoder_;
  StopMatcher stops_;
  std::optional<grammar::GrammarMatcher> matcher_;  // with GenerateOptions::constraint
  std::vector<int32_t> context_;
  std::vector<float> logits_, logp_;
  std::vector<int32_t> order_;
  GenerateResult result_;
  bool done_ = false;
};

// Speculative verification: row i (i = 0..k) of `rows` holds the target's logits after the pending
// token and drafts 0..i-1. Takes tokens row by row until a draft is rejected (that row's own
// token ends the step) or all k were kept (one more token from the last row). `take(ev, end)`
// sees each token and returns false to stop (generation ended, cancelled, context full).
// Returns the drafts kept: their positions stay in the cache, the rest are rolled back.
template <class Take>
int64_t verify_drafts(TokenGenerator& gen, const float* rows, int64_t vocab, const DraftProposal& d, TokenEvent& ev,
                      Take&& take) {
  const int64_t k = (int64_t)d.tokens.size();
  for (int64_t i = 0; i <= k; i++) {
    bool kept = false;
    const float* row = rows + i * vocab;
    bool end = i < k ? gen.next_verified(row, vocab, d.tokens[(size_t)i], d.dists[(size_t)i], ev, kept)
                     : gen.next(row, vocab, ev);
    if (!take(ev, end)) return i + (kept ? 1 : 0);
    if (!kept) return i;
  }
  return k;
}

// Runs generation; on_token returns false to cancel (finish_reason "cancelled").
GenerateResult generate(Session& session, const Tokenizer& tok, const std::vector<int32_t>& prompt,
                        const GenerateOptions& opts, const std::function<bool(const TokenEvent&)>& on_token);

}  // namespace kvad
