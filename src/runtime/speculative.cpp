#include "runtime/speculative.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/sampling.h"
#include "runtime/engine.h"
#include "runtime/loader.h"

namespace kvad {

void validate(const SpeculativeOptions& o) {
  if (o.draft_max < 1 || o.draft_max > 64) fail("--draft-max must be between 1 and 64 (got {})", o.draft_max);
  if (o.draft_min < 0 || o.draft_min > o.draft_max)
    fail("--draft-min must be between 0 and --draft-max ({}) (got {})", o.draft_max, o.draft_min);
}

DraftLength::DraftLength(const SpeculativeOptions& o)
    : lo_(std::max<int64_t>(1, o.draft_min)), hi_(o.draft_max), k_(std::clamp<int64_t>(4, lo_, hi_)) {}

int64_t DraftLength::next() {
  if (pause_ > 0) {
    pause_--;
    return 0;
  }
  return k_;
}

void DraftLength::update(int64_t proposed, int64_t kept) {
  if (proposed <= 0) return;
  if (kept == 0) {
    pause_ = backoff_;
    backoff_ = std::min<int64_t>(32, backoff_ * 2);
  } else {
    backoff_ = 1;
  }
  // All kept: the drafter is on a run, reach further. A rejection: the run it had is the best guess.
  k_ = kept == proposed ? std::min(hi_, k_ + 1) : std::clamp<int64_t>(kept + 1, lo_, hi_);
}

// --- prompt lookup ----------------------------------------------------------------------------

namespace {

class LookupDrafter final : public Drafter {
 public:
  LookupDrafter(int64_t lo, int64_t hi) : lo_(lo), hi_(hi) {}
  void propose(std::span<const int32_t> c, int64_t k, DraftProposal& out) override {
    out.clear();
    const int64_t n = (int64_t)c.size();
    for (int64_t g = std::min(hi_, n - 1); g >= lo_ && k > 0; g--) {
      const int32_t* tail = c.data() + n - g;
      for (int64_t start = n - g - 1; start >= 0; start--) {  // latest first; what follows starts before the tail ends
        if (!std::equal(tail, tail + g, c.data() + start)) continue;
        for (int64_t i = start + g; i < n && (int64_t)out.tokens.size() < k; i++) out.add(c[(size_t)i]).certain(c[(size_t)i]);
        return;
      }
    }
  }

 private:
  int64_t lo_, hi_;
};

class LookupSource final : public DraftSource {
 public:
  LookupSource(int64_t lo, int64_t hi) : lo_(lo), hi_(hi) {}
  std::string describe() const override { return fmt::format("prompt lookup (n-grams {}..{})", lo_, hi_); }
  std::unique_ptr<Drafter> open(const SamplingParams&) override { return std::make_unique<LookupDrafter>(lo_, hi_); }

 private:
  int64_t lo_, hi_;
};

// --- a draft model ----------------------------------------------------------------------------

class ModelDraftSource;

class ModelDrafter final : public Drafter {
 public:
  ModelDrafter(std::unique_ptr<Session> s, const SamplingParams& p, int64_t target_vocab, double p_min)
      : session_(std::move(s)), sampler_(p), greedy_(p.temperature == 0), vocab_(target_vocab), p_min_(p_min) {}

  void propose(std::span<const int32_t> c, int64_t k, DraftProposal& out) override {
    out.clear();
    const int64_t n = (int64_t)c.size();
    k = std::min(k, session_->context_length() - n + 1);  // the drafts but the last are forwarded here
    if (k <= 0 || n == 0) return;
    context_.assign(c.begin(), c.end());  // members: capacity kept, no allocation once grown
    int64_t held = session_->reuse_prefix(context_);
    tail_.assign(context_.begin() + held, context_.end());
    const std::vector<float>* logits = &session_->forward(tail_);
    for (int64_t i = 0; i < k; i++) {
      int32_t d = choose(*logits, out);
      if (d < 0) return;
      if (i + 1 < k) {
        tail_.assign(1, d);
        logits = &session_->forward_tentative(tail_, /*all_rows=*/false);
      }
    }
  }

 private:
  // The next draft token into `out`, or -1 when the draft is not confident enough to go on.
  int32_t choose(const std::vector<float>& logits, DraftProposal& out) {
    logits_.assign(logits.begin(), logits.begin() + std::min<int64_t>(vocab_, (int64_t)logits.size()));
    int32_t d;
    double confidence;
    if (greedy_) {
      const int64_t V = (int64_t)logits_.size();
      d = (int32_t)kernels::argmax(logits_.data(), V);
      // the draft's own softmax at temperature 1: p(d) = 1 / sum exp(l - l_d)
      weights_.resize(logits_.size());
      confidence = 1 / kernels::exp_weights(logits_.data(), V, 1.0f, logits_[(size_t)d], weights_.data());
    } else {
      sampler_.prepare(logits_, {}, {});
      d = sampler_.draw();
      confidence = sampler_.prepared().probability(d);
    }
    if (confidence < p_min_) return -1;
    TokenDistribution& q = out.add(d);
    if (greedy_) q.certain(d);
    else q = sampler_.prepared();  // copy-assign into the kept capacity
    return d;
  }

  std::unique_ptr<Session> session_;
  Sampler sampler_;
  bool greedy_;
  int64_t vocab_;
  double p_min_;
  std::vector<int32_t> context_, tail_;
  std::vector<float> logits_, weights_;
};

class ModelDraftSource final : public DraftSource {
 public:
  ModelDraftSource(std::shared_ptr<LoadedModel> m, int64_t target_vocab, int64_t ctx, int64_t sequences, double p_min)
      : m_(std::move(m)), target_vocab_(target_vocab), p_min_(p_min) {
    EngineOptions o;
    o.ctx = ctx;
    o.max_running = std::max<int64_t>(1, sequences);
    engine_ = std::make_unique<Engine>(*m_->model, o);
    if (!m_->model->memory_spec().rewindable())
      fail("{}: this draft model keeps a recurrent state, which cannot rewind past rejected drafts; use a draft "
           "with ordinary attention or --spec lookup",
           m_->path);
  }
  std::string describe() const override { return "draft model " + m_->name; }
  std::unique_ptr<Drafter> open(const SamplingParams& target) override {
    SamplingParams p = target;  // the draft's own randomness, and no penalties: any q keeps the output exact
    p.seed = target.seed ^ 0x9e3779b97f4a7c15ull;
    p.repetition_penalty = 1;
    p.presence_penalty = p.frequency_penalty = 0;
    return std::make_unique<ModelDrafter>(engine_->open_session(), p, target_vocab_, p_min_);
  }

 private:
  std::shared_ptr<LoadedModel> m_;
  int64_t target_vocab_;
  double p_min_;
  std::unique_ptr<Engine> engine_;
};

}  // namespace

std::shared_ptr<DraftSource> make_lookup_draft(int64_t ngram_min, int64_t ngram_max) {
  if (ngram_min < 1 || ngram_max < ngram_min || ngram_max > 64)
    fail("prompt lookup n-grams must satisfy 1 <= min <= max <= 64 (got {}..{})", ngram_min, ngram_max);
  return std::make_shared<LookupSource>(ngram_min, ngram_max);
}

std::shared_ptr<DraftSource> make_model_draft(std::shared_ptr<LoadedModel> draft, int64_t target_vocab, int64_t ctx,
                                              int64_t sequences, double p_min) {
  if (!(p_min >= 0 && p_min < 1)) fail("--draft-p-min must be in [0, 1) (got {})", p_min);
  return std::make_shared<ModelDraftSource>(std::move(draft), target_vocab, ctx, sequences, p_min);
}

void check_draft_vocabulary(const LoadedModel& target, const LoadedModel& draft) {
  const Tokenizer &a = *target.tokenizer, &b = *draft.tokenizer;
  if (std::abs(a.vocab_size() - b.vocab_size()) > 128)
    fail("draft model {}: its tokenizer has {} tokens, the target's ({}) has {}; a draft needs the same tokenizer",
         draft.path, b.vocab_size(), target.path, a.vocab_size());
  for (int32_t id = 0; id < std::min(a.vocab_size(), b.vocab_size()); id++)
    if (a.token_bytes(id) != b.token_bytes(id) || a.is_special(id) != b.is_special(id))
      fail("draft model {}: token {} differs from the target's ({}); a draft needs the same tokenizer", draft.path, id,
           target.path);
}

SpeculativeOptions speculative_options(const SpeculativeConfig& a, const LoadedModel& target, int64_t ctx,
                                       int64_t sequences, std::string* note) {
  SpeculativeOptions o;
  o.draft_max = a.draft_max;
  o.draft_min = a.draft_min;
  validate(o);
  if (!a.draft.empty() && !a.spec.empty()) fail("--draft and --spec {} both name a draft source: give one", a.spec);
  if (a.any() && !target.model->memory_spec().rewindable())
    fail("{}: speculative decoding needs a memory that can roll back rejected drafts, and this model keeps a "
         "recurrent state; run without --draft / --spec",
         target.path);
  if (a.spec == "ngram") o.source = make_lookup_draft(a.ngram_min, a.ngram_max);
  if (a.draft.empty()) return o;
  LoadOptions lo;
  lo.format = parse_weight_format(a.draft_quant);
  auto draft = std::make_shared<LoadedModel>(load_model(a.draft, lo));
  if (note) *note = draft->load_report.note;
  check_draft_vocabulary(target, *draft);
  o.source = make_model_draft(draft, target.model->config().vocab_size, ctx, sequences, a.draft_p_min);
  return o;
}

}  // namespace kvad
