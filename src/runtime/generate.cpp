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

GenerateResult generate(Session& session, const Tokenizer& tok, const std::vector<int32_t>& prompt,
                        const GenerateOptions& opts, const std::function<bool(const TokenEvent&)>& on_token) {
  using clock = std::chrono::steady_clock;
  if (prompt.empty()) fail("the prompt is empty: nothing to continue from");
  if ((int64_t)prompt.size() >= session.context_length())
    fail("the prompt has {} tokens but the model's context is {} tokens (leave room for at least one new token)",
         prompt.size(), session.context_length());
  GenerateResult res;
  res.prompt_tokens = (int64_t)prompt.size();
  auto t0 = clock::now();
  int64_t landed = opts.reuse_prefix ? reuse_prefix(session, prompt) : session.truncate(0);
  res.cached_tokens = landed;
  std::vector<float> logits =
      session.forward(std::vector<int32_t>(prompt.begin() + landed, prompt.end()));
  auto t1 = clock::now();
  res.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();

  Sampler sampler(opts.sampling);
  StreamDecoder decoder(tok);
  StopMatcher stops(opts.stop);
  std::vector<int32_t> context = prompt;
  std::vector<float> logp;
  res.finish_reason = "length";
  for (int64_t i = 0; i < opts.max_tokens; i++) {
    int32_t id = sampler.sample(logits, context, res.tokens);
    res.tokens.push_back(id);
    context.push_back(id);
    bool is_eos = std::find(opts.stop_ids.begin(), opts.stop_ids.end(), id) != opts.stop_ids.end();
    std::string text = is_eos ? "" : stops.push(decoder.push(id));
    res.text += text;
    TokenEvent ev;
    ev.id = id;
    ev.text = text;
    if (opts.top_logprobs >= 0) {  // sample() left the penalised logits in place
      Sampler::log_softmax(logits, logp);
      ev.logprob = logp[(size_t)id];
      size_t k = std::min((size_t)opts.top_logprobs, logp.size());
      std::vector<int32_t> idx(logp.size());
      for (size_t j = 0; j < idx.size(); j++) idx[j] = (int32_t)j;
      std::partial_sort(idx.begin(), idx.begin() + (ptrdiff_t)k, idx.end(), [&](int32_t a, int32_t b) {
        return logp[(size_t)a] > logp[(size_t)b] || (logp[(size_t)a] == logp[(size_t)b] && a < b);
      });
      for (size_t j = 0; j < k; j++) ev.top.push_back({idx[j], logp[(size_t)idx[j]]});
    }
    if (!on_token(ev)) {
      res.finish_reason = "cancelled";
      break;
    }
    if (is_eos || stops.stopped()) {
      res.finish_reason = "stop";
      break;
    }
    if (i + 1 == opts.max_tokens) break;
    if (session.cached() + 1 > session.context_length()) break;  // context full: "length"
    logits = session.forward({id});
  }
  if (res.finish_reason != "stop") {
    std::string rest = stops.push(decoder.flush());
    rest += stops.flush();
    if (!rest.empty()) {
      res.text += rest;
      TokenEvent last;
      last.id = -1;
      last.text = rest;
      on_token(last);
    }
  }
  res.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
  return res;
}

}  // namespace kvad
