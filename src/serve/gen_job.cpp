#include "serve/gen_job.h"

#include <algorithm>

namespace kvad::serve {

GenerationRequest GenJob::request(EngineThread& thread) {
  GenerationRequest r;
  r.prompt = prompt_;
  r.opts = opts_;
  r.tokenizer = model_->tokenizer.get();
  r.cache_salt = salt_;
  r.loras = loras_;
  r.n = n_;
  const Tokenizer& tok = *model_->tokenizer;
  std::shared_ptr<GenJob> self = shared_from_this();
  r.on_token = [this, self, &tok](const TokenEvent& ev) {
    if (first_) {
      ttft_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
      first_ = false;
    }
    GenEvent g;
    g.kind = GenEvent::Token;
    g.choice = ev.choice;
    bool eos = std::find(opts_.stop_ids.begin(), opts_.stop_ids.end(), ev.id) != opts_.stop_ids.end();
    g.tok.id = eos ? -1 : ev.id;  // the end-of-sequence token is not part of the answer
    g.tok.text = ev.text;
    if (g.tok.id >= 0 && opts_.top_logprobs >= 0) {
      g.tok.piece = tok.token_bytes(ev.id);
      g.tok.logprob = ev.logprob;
      for (const auto& [id, lp] : ev.top) g.tok.top.push_back({tok.token_bytes(id), lp});
    }
    push(std::move(g));
    return !cancelled_.load();
  };
  r.on_done = [this, self, &thread](GenerateResult&& res, const std::string& error) {
    LiveStats& st = thread.stats();
    const int32_t choice = res.choice;
    if (error.empty() && choice == 0) {
      st.last_prompt_tokens = res.prompt_tokens;
      st.last_cached_tokens = res.cached_tokens;
      st.last_completion_tokens = (int64_t)res.tokens.size();
      st.last_prefill_tok_s = res.prefill_tok_s();
      if (res.decode_tok_s() > 0) st.last_decode_tok_s = res.decode_tok_s();
      st.last_ttft_s = ttft_;
    }
    // Once the last choice ends, and before the client hears it: its next request is not refused.
    if (++ended_ == n_) thread.generation_finished();
    if (!error.empty()) return fail(error, 500);
    GenEvent g;
    g.kind = GenEvent::Done;
    g.choice = choice;
    g.result = std::move(res);
    g.ttft_seconds = ttft_;
    push(std::move(g));
  };
  r.cancelled = [this, self] { return cancelled_.load(); };
  return r;
}

void GenJob::fail(const std::string& message, int status) {
  GenEvent g;
  g.kind = GenEvent::Failed;
  g.error = message;
  g.status = status;
  push(std::move(g));
}

void GenJob::push(GenEvent ev) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    q_.push_back(std::move(ev));
  }
  cv_.notify_one();
}

bool GenJob::next(GenEvent& out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  if (!cv_.wait_for(lk, timeout, [&] { return !q_.empty(); })) return false;
  out = std::move(q_.front());
  q_.pop_front();
  return true;
}

bool GenJob::next_batch(std::vector<GenEvent>& out, std::chrono::milliseconds timeout) {
  out.clear();
  std::unique_lock<std::mutex> lk(mu_);
  if (!cv_.wait_for(lk, timeout, [&] { return !q_.empty(); })) return false;
  while (!q_.empty()) {
    out.push_back(std::move(q_.front()));
    q_.pop_front();
  }
  return true;
}

}  // namespace kvad::serve
