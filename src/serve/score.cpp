#include "serve/score.h"

#include <chrono>
#include <cmath>

#include "runtime/sampler.h"
#include "serve/openai.h"

namespace kvad::serve {

static int64_t codepoints(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

void ScoreJob::run(Engine& e) {
  auto m = e.model();
  if (!m) throw HttpError(404, "no model is loaded", "invalid_request_error", "model", "model_not_found");
  auto t0 = std::chrono::steady_clock::now();
  std::vector<int32_t> ids = m->tokenizer->encode(text_, /*parse_special=*/false, /*add_special=*/true);
  if (ids.size() < 2) throw HttpError(400, "the text is too short to score (it needs at least two tokens)");
  int64_t ctx = e.context_length();
  int64_t W = std::max<int64_t>(2, std::min(window_ > 0 ? window_ : ctx, ctx));
  const int64_t V = m->model->config().vocab_size;
  const int64_t chunk = 32;  // positions per forward: logits are [chunk, vocab]
  std::vector<float> logits((size_t)(chunk * V)), row, lp;
  double nll = 0;
  int64_t predicted = 0;
  size_t start = 0;
  while (start + 1 < ids.size() && !cancelled_) {
    size_t end = std::min(ids.size(), start + (size_t)W);
    auto state = m->model->new_state();
    for (size_t p = start; p + 1 < end && !cancelled_; p += chunk) {
      int64_t n = (int64_t)std::min<size_t>(chunk, end - 1 - p);  // positions whose next token is known
      m->model->forward(ids.data() + p, n, *state, logits.data(), /*all_positions=*/true);
      for (int64_t i = 0; i < n; i++) {
        row.assign(logits.begin() + i * V, logits.begin() + (i + 1) * V);
        Sampler::log_softmax(row, lp);
        nll -= lp[(size_t)ids[p + (size_t)i + 1]];
        predicted++;
      }
    }
    start = end - 1;  // the window's last token starts the next one
  }
  if (cancelled_) throw HttpError(503, "scoring was cancelled", "server_error");
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Characters and bytes predicted: the text less what the first token(s) stand for.
  std::string first = m->tokenizer->decode({ids[0]}, /*skip_special=*/true);
  int64_t chars = std::max<int64_t>(1, codepoints(text_) - codepoints(first));
  int64_t bytes = std::max<int64_t>(1, (int64_t)text_.size() - (int64_t)first.size());
  double nats_per_token = nll / (double)predicted;
  result_ = {{"model", model_id(*m)},
             {"tokens", ids.size()},
             {"predicted_tokens", predicted},
             {"characters", chars},
             {"bytes", bytes},
             {"window", W},
             {"nll_per_token", nats_per_token},
             {"perplexity", std::exp(nats_per_token)},
             {"bits_per_token", nats_per_token / std::log(2.0)},
             {"bits_per_char", nll / std::log(2.0) / (double)chars},
             {"bits_per_byte", nll / std::log(2.0) / (double)bytes},
             {"seconds", secs},
             {"tokens_per_second", secs > 0 ? (double)predicted / secs : 0}};
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
