#include "serve/gen_job.h"

#include <algorithm>

namespace kvad::serve {

void GenJob::run(Engine& e) {
  if (cancelled_) {
    result_.finish_reason = "cancelled";
    return;
  }
  if (e.model() != model_)
    throw HttpError(503, "the model was replaced while this request waited; send it again", "server_error", "",
                    "model_changed");
  Session& session = e.session_for(prompt_);
  const Tokenizer& tok = *model_->tokenizer;
  auto t0 = std::chrono::steady_clock::now();
  bool first = true;
  result_ = generate(session, tok, prompt_, opts_, [&](const TokenEvent& ev) {
    if (first) {
      ttft_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      first = false;
    }
    GenEvent g;
    g.kind = GenEvent::Token;
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
  });
  EngineStats& st = sched_.stats();
  st.last_prompt_tokens = result_.prompt_tokens;
  st.last_cached_tokens = result_.cached_tokens;
  st.last_completion_tokens = (int64_t)result_.tokens.size();
  st.last_prefill_tok_s = result_.prefill_tok_s();
  if (result_.decode_tok_s() > 0) st.last_decode_tok_s = result_.decode_tok_s();
  st.last_ttft_s = ttft_;
}

void GenJob::publish() {
  GenEvent g;
  g.kind = GenEvent::Done;
  g.result = std::move(result_);
  g.ttft_seconds = ttft_;
  push(std::move(g));
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
