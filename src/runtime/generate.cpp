#include "runtime/generate.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "core/utf8.h"

namespace kvad {

double GenerateResult::prefill_tok_s() const {
  int64_t n = prompt_tokens - cached_tokens;
  return prefill_seconds > 0 ? (double)n / prefill_seconds : 0;
}

double GenerateResult::decode_tok_s() const {
  // The first generated token comes from the prefill's logits; the rest each cost one decode step.
  int64_t steps = (int64_t)tokens.size() - 1;
  return decode_seconds > 0 && steps > 0 ? (double)steps / decode_seconds : 0;
}

std::string StopMatcher::push(const std::string& text) {
  if (stopped_) return "";
  held_ += text;
  size_t cut = std::string::npos;
  for (const std::string& s : stops_) {
    if (s.empty()) continue;
    size_t p = held_.find(s);
    if (p != std::string::npos && p < cut) cut = p;
  }
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, cut);
    held_.clear();
    return out;
  }
  // Keep the longest suffix of held_ that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const std::string& s : stops_)
    for (size_t k = std::min(s.size() - (s.empty() ? 0 : 1), held_.size()); k > keep; k--)
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::flush() {
  std::string out = stopped_ ? "" : held_;
  held_.clear();
  return out;
}

std::shared_ptr<const grammar::TokenTrie> grammar_vocab(const Tokenizer& tok, const std::vector<int32_t>& eos) {
  std::vector<std::string> bytes((size_t)tok.vocab_size());
  for (int32_t id = 0; id < tok.vocab_size(); id++)
    if (!tok.is_special(id)) bytes[(size_t)id] = tok.token_bytes(id);
  return std::make_shared<const grammar::TokenTrie>(grammar::TokenTrie::build(bytes, eos));
}

TokenGenerator::TokenGenerator(const Tokenizer& tok, const std::vector<int32_t>& prompt, const GenerateOptions& opts)
    : opts_(opts), sampler_(opts.sampling), decoder_(tok), stops_(opts.stop), context_(prompt) {
  if (opts_.constraint.grammar) {
    if (!opts_.constraint_vocab) opts_.constraint_vocab = grammar_vocab(tok, opts_.stop_ids);
    matcher_.emplace(opts_.constraint.grammar, opts_.constraint_vocab);
  }
  result_.prompt_tokens = (int64_t)prompt.size();
  result_.finish_reason = "length";
  context_.reserve(prompt.size() + (size_t)std::max<int64_t>(0, std::min<int64_t>(opts.max_tokens, 1 << 20)));
}

bool TokenGenerator::next(const float* logits, int64_t vocab, TokenEvent& ev) {
  prepare(logits, vocab);
  return emit(sampler_.draw(), ev);
}

bool TokenGenerator::next_verified(const float* logits, int64_t vocab, int32_t draft, const TokenDistribution& q,
                                   TokenEvent& ev, bool& accepted) {
  prepare(logits, vocab);
  return emit(sampler_.verify(draft, q, accepted), ev);
}

void TokenGenerator::prepare(const float* logits, int64_t vocab) {
  logits_.assign(logits, logits + vocab);
  if (matcher_) matcher_->mask_logits(logits_.data(), vocab);
  sampler_.prepare(logits_, context_, result_.tokens);
}

bool TokenGenerator::emit(int32_t id, TokenEvent& ev) {
  // The mask allowed only what the grammar takes, so this advances; false only for an EOS the
  // mask let through because nothing else fitted, which ends generation below anyway.
  if (matcher_) matcher_->accept(id);
  result_.tokens.push_back(id);
  context_.push_back(id);
  bool is_eos = std::find(opts_.stop_ids.begin(), opts_.stop_ids.end(), id) != opts_.stop_ids.end();
  std::string text = is_eos ? "" : stops_.push(decoder_.push(id));
  // A complete grammar ends generation now (EOS is all that could follow): nothing is held back
  // for a stop string that can no longer come.
  bool grammar_done = matcher_ && !is_eos && !stops_.stopped() && matcher_->finished();
  if (grammar_done) {
    text += stops_.push(decoder_.flush());
    text += stops_.flush();
  }
  result_.text += text;
  ev.id = id;
  ev.text = std::move(text);
  ev.top.clear();
  if (opts_.top_logprobs >= 0) {  // prepare() left the penalised logits in place
    Sampler::log_softmax(logits_, logp_);
    ev.logprob = logp_[(size_t)id];
    size_t k = std::min((size_t)opts_.top_logprobs, logp_.size());
    order_.resize(logp_.size());
    for (size_t j = 0; j < order_.size(); j++) order_[j] = (int32_t)j;
    std::partial_sort(order_.begin(), order_.begin() + (ptrdiff_t)k, order_.end(), [&](int32_t a, int32_t b) {
      return logp_[(size_t)a] > logp_[(size_t)b] || (logp_[(size_t)a] == logp_[(size_t)b] && a < b);
    });
    for (size_t j = 0; j < k; j++) ev.top.push_back({order_[j], logp_[(size_t)order_[j]]});
  }
  if (is_eos || stops_.stopped() || grammar_done) {
    result_.finish_reason = "stop";
    done_ = true;
  } else if ((int64_t)result_.tokens.size() >= opts_.max_tokens) {
    done_ = true;  // "length"
  }
  return done_;
}

std::string TokenGenerator::flush() {
  done_ = true;
  if (result_.finish_reason == "stop") return "";
  std::string rest = stops_.push(decoder_.flush());
  rest += stops_.flush();
  result_.text += rest;
  return rest;
}

GenerateResult generate(Session& session, const Tokenizer& tok, const std::vector<int32_t>& prompt,
                        const GenerateOptions& opts, const std::function<bool(const TokenEvent&)>& on_token) {
  using clock = std::chrono::steady_clock;
  if (prompt.empty()) fail("the prompt is empty: nothing to continue from");
  if ((int64_t)prompt.size() >= session.context_length())
    fail("the prompt has {} tokens but the model's context is {} tokens (leave room for at least one new token)",
         prompt.size(), session.context_length());
  TokenGenerator gen(tok, prompt, opts);
  auto t0 = clock::now();
  int64_t landed = opts.reuse_prefix ? reuse_prefix(session, prompt) : session.truncate(0);
  gen.result().cached_tokens = landed;
  const std::vector<float>* logits = &session.forward(std::vector<int32_t>(prompt.begin() + landed, prompt.end()));
  auto t1 = clock::now();
  gen.result().prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  const int64_t V = session.vocab_size();
  const SpeculativeOptions& spec = opts.speculative;
  std::unique_ptr<Drafter> drafter = spec.enabled() ? spec.source->open(opts.sampling) : nullptr;
  std::optional<DraftLength> length;
  if (drafter) length.emplace(spec);
  DraftProposal draft;
  std::vector<int32_t> all = prompt, rows;  // every token so far; the rows of one forward
  all.reserve(prompt.size() + (size_t)std::min<int64_t>(opts.max_tokens, 1 << 20));
  TokenEvent ev;
  bool stopped = false;
  // Each token goes to the caller; false ends generation (finished, cancelled, or context full).
  auto take = [&](const TokenEvent& e, bool end) {
    if (!on_token(e)) {
      gen.set_finish("cancelled");
      return !(stopped = true);
    }
    if (end) return !(stopped = true);
    all.push_back(e.id);
    if ((int64_t)all.size() > session.context_length()) {  // no position left for it: "length", and says so
      gen.set_context_full(session.context_length());
      return !(stopped = true);
    }
    return true;
  };
  take(ev, gen.next(logits->data(), V, ev));
  while (!stopped) {
    // all.back() is the pending token: sampled, not yet forwarded (session.cached() positions are).
    const int64_t base = session.cached();
    int64_t k = 0;
    if (drafter) {
      k = std::min({length->next(), opts.max_tokens - (int64_t)gen.generated().size() - 1,
                    session.context_length() - base - 1});
      draft.clear();
      if (k > 0) {
        try {
          drafter->propose(all, k, draft);
        } catch (const Error&) {  // e.g. a draft engine out of blocks: go on without drafts
          draft.clear();
          drafter.reset();
          continue;
        }
      }
      if ((int64_t)draft.tokens.size() < std::max<int64_t>(1, spec.draft_min)) draft.clear();
      k = (int64_t)draft.tokens.size();
    }
    rows.assign(1, all.back());
    rows.insert(rows.end(), draft.tokens.begin(), draft.tokens.end());
    if (k == 0) {
      logits = &session.forward(rows);
      take(ev, gen.next(logits->data(), V, ev));
      continue;
    }
    logits = &session.forward_tentative(rows, /*all_rows=*/true);
    int64_t kept = verify_drafts(gen, logits->data(), V, draft, ev, take);
    session.truncate(base + 1 + kept);  // the rejected drafts' positions were never there
    length->update(k, kept);
    gen.result().draft_tokens += k;
    gen.result().draft_accepted += kept;
  }
  std::string rest = gen.flush();
  if (!rest.empty()) {
    TokenEvent last;
    last.id = -1;
    last.text = rest;
    on_token(last);
  }
  GenerateResult res = std::move(gen.result());
  res.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
  return res;
}

}  // namespace kvad
