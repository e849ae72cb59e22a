// Speculative decoding (docs/speculative.md). A cheap drafter proposes the next k tokens; the
// target scores them all in ONE forward of k+1 rows (the pending token and the drafts); each row
// is verified in turn (TokenGenerator::next_verified) until a draft is rejected, and the target's
// own token ends the step. Output is the target's: token for token under greedy, in distribution
// under sampling. Rejected positions are rolled back with truncate, so the cache holds exactly
// what plain decoding would. Decode on a CPU is bound by weight traffic: k+1 rows cost far less
// than k+1 steps, so every kept draft is nearly free.
//
// Two drafters: prompt lookup (the continuation of the latest earlier match of the last n tokens:
// free, and right whenever the output copies its input) and a draft model (a smaller model, or the
// target's q4 copy, with the same tokenizer, run through its own engine).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/sampler.h"
#include "runtime/session.h"

namespace kvad {

class Engine;
struct LoadedModel;

// A drafter's proposal: tokens[i] was drawn from dists[i] (certain for greedy and lookup drafts).
// dists keeps its capacity between steps: `size` counts the live entries.
struct DraftProposal {
  std::vector<int32_t> tokens;
  std::vector<TokenDistribution> dists;
  void clear() { tokens.clear(); }
  TokenDistribution& add(int32_t token) {
    tokens.push_back(token);
    if (dists.size() < tokens.size()) dists.resize(tokens.size());
    return dists[tokens.size() - 1];
  }
};

// One sequence's drafter.
class Drafter {
 public:
  virtual ~Drafter() = default;
  // Up to k tokens likely to follow `context` (prompt + generated; its last token is the one the
  // target forwards next). Fewer, or none, when it has no good guess.
  virtual void propose(std::span<const int32_t> context, int64_t k, DraftProposal& out) = 0;
};

// Where drafts come from; opens one drafter per sequence. Shared by every sequence of an engine.
class DraftSource {
 public:
  virtual ~DraftSource() = default;
  virtual std::string describe() const = 0;  // "prompt lookup (n-grams 1..4)", "draft model NAME"
  virtual std::unique_ptr<Drafter> open(const SamplingParams& target) = 0;
};

// Prompt lookup: the longest n-gram (n from ngram_max down to ngram_min) ending the context that
// occurred earlier, latest occurrence first; proposes what followed it.
std::shared_ptr<DraftSource> make_lookup_draft(int64_t ngram_min = 1, int64_t ngram_max = 4);
// A draft model: its own engine (up to `sequences` drafters at once, context `ctx`), proposing
// ids below the target's `target_vocab`. Sampling drafts use the target's temperature and filters
// (penalties off); a greedy target drafts greedily. A proposal stops once the draft's own
// probability of its choice falls under p_min (a likely rejection costs a verification row).
std::shared_ptr<DraftSource> make_model_draft(std::shared_ptr<LoadedModel> draft, int64_t target_vocab, int64_t ctx,
                                              int64_t sequences, double p_min);
// Refuses a draft whose vocabulary does not match the target's: same size (up to the padding some
// families add, at most 128 ids) and the same text for every id both have.
void check_draft_vocabulary(const LoadedModel& target, const LoadedModel& draft);

struct SpeculativeOptions {
  std::shared_ptr<DraftSource> source;  // null: no speculation
  int64_t draft_max = 16;               // tokens proposed per step at most
  int64_t draft_min = 0;                // shorter proposals are not worth a verification: plain step
  bool enabled() const { return source != nullptr; }
};

// Checks the bounds; throws naming the flag.
void validate(const SpeculativeOptions& o);

// What a user asks for (--draft MODEL or --spec ngram and their knobs), before anything is loaded.
struct SpeculativeConfig {
  std::string draft;               // a draft model: any name load_model takes
  std::string draft_quant = "auto";
  std::string spec;                // "ngram": prompt lookup, no second model
  int64_t draft_max = 16, draft_min = 0;
  double draft_p_min = 0.75;
  int64_t ngram_min = 1, ngram_max = 4;
  bool any() const { return !draft.empty() || !spec.empty(); }
};
// The options it names for `target` (no source when it names none): a draft model is loaded, with
// an engine for `sequences` drafters at context `ctx`, and its vocabulary checked. `note` gets the
// draft's load note ("quantised to q4, cached to ...").
SpeculativeOptions speculative_options(const SpeculativeConfig& c, const LoadedModel& target, int64_t ctx,
                                       int64_t sequences, std::string* note = nullptr);

// The per-sequence length of the next proposal: grows by one while every draft is kept, falls to
// just past the last kept run when one is rejected, within [max(draft_min, 1), draft_max]. A
// proposal rejected whole pauses drafting for 1, 2, 4 .. 32 steps (reset by a kept draft): each
// rejected draft costs a row of the verifying forward, so a drafter that keeps missing (a
// passage the output has left) stops costing anything within a few steps.
class DraftLength {
 public:
  explicit DraftLength(const SpeculativeOptions& o);
  int64_t next();  // 0 while paused; one call per decode step
  void update(int64_t proposed, int64_t kept);

 private:
  int64_t lo_, hi_, k_;
  int64_t pause_ = 0, backoff_ = 1;
};

}  // namespace kvad
