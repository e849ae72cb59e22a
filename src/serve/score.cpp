#include "serve/score.h"

#include "runtime/score.h"
#include "serve/openai.h"

namespace kvad::serve {

void ScoreJob::run(ModelHost& e) {
  auto m = e.model();
  if (!m || !e.engine()) throw HttpError(404, "no model is loaded", "invalid_request_error", "model", "model_not_found");
  ScoreResult r;
  try {
    r = score_text(*e.engine(), *m->tokenizer, text_, window_, [this] { return cancelled_.load(); });
  } catch (const Error& x) {
    if (cancelled_) throw HttpError(503, "scoring was cancelled", "server_error");
    throw HttpError(400, x.what(), "invalid_request_error", "text");
  }
  result_ = {{"model", model_id(*m)},
             {"tokens", r.tokens},
             {"predicted_tokens", r.predicted},
             {"characters", r.chars},
             {"bytes", r.bytes},
             {"window", r.window},
             {"nll_per_token", r.nll_per_token()},
             {"perplexity", r.perplexity()},
             {"bits_per_token", r.bits_per_token()},
             {"bits_per_char", r.bits_per_char()},
             {"bits_per_byte", r.bits_per_byte()},
             {"seconds", r.seconds},
             {"tokens_per_second", r.seconds > 0 ? (double)r.predicted / r.seconds : 0}};
}

void ScoreJob::publish() {
  std::lock_guard<std::mutex> lk(mu_);
  done_ = true;
  cv_.notify_all();
}

void ScoreJob::fail(const std::string& message, int status) {
  std::lock_guard<std::mutex> lk(mu_);
  error_ = message;
  status_ = status;
  done_ = true;
  cv_.notify_all();
}

Json ScoreJob::wait() {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return done_; });
  if (!error_.empty()) throw HttpError(status_, error_, status_ >= 500 ? "server_error" : "invalid_request_error");
  return result_;
}

}  // namespace kvad::serve
