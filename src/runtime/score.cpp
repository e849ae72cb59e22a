#include "runtime/score.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"
#include "kernels/sampling.h"

namespace kvad {

double ScoreResult::perplexity() const { return std::exp(nll_per_token()); }
double ScoreResult::bits_per_token() const { return nll_per_token() / std::log(2.0); }
double ScoreResult::bits_per_char() const { return chars ? nll / std::log(2.0) / (double)chars : 0; }
double ScoreResult::bits_per_byte() const { return bytes ? nll / std::log(2.0) / (double)bytes : 0; }

namespace {
// log-sum-exp of a logits row, in double.
double log_partition(const float* l, int64_t V) {
  double mx = l[0], z = 0;
  for (int64_t j = 1; j < V; j++) mx = std::max(mx, (double)l[j]);
  for (int64_t j = 0; j < V; j++) z += std::exp((double)l[j] - mx);
  return mx + std::log(z);
}

// KL(p || q) of two logits rows: sum p (log p - log q).
double kl_divergence(const float* p, const float* q, int64_t V) {
  double lp = log_partition(p, V), lq = log_partition(q, V), kl = 0;
  for (int64_t j = 0; j < V; j++) {
    double a = (double)p[j] - lp;
    kl += std::exp(a) * (a - ((double)q[j] - lq));
  }
  return std::max(0.0, kl);
}

}  // namespace

ScoreResult score_text(Engine& engine, const Tokenizer& tok, const std::string& text, int64_t window,
                       const std::function<bool()>& cancelled, Engine* reference) {
  auto t0 = std::chrono::steady_clock::now();
  std::vector<int32_t> ids = tok.encode(text, /*parse_special=*/false, /*add_special=*/false);
  if (ids.size() < 2) fail("the text is too short to score (it has {} tokens; at least two are needed)", ids.size());
  ScoreResult r;
  r.tokens = (int64_t)ids.size();
  r.window = std::clamp<int64_t>(window > 0 ? window : engine.context_length(), 1, engine.context_length());
  const int64_t V = engine.model().config().vocab_size;
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(256, (int64_t)(64 << 20) / (V * 4)));  // logits <= 64 MiB
  if (reference && reference->model().config().vocab_size != V) fail("the reference model has another vocabulary");
  std::unique_ptr<Session> s = engine.open_session();
  std::unique_ptr<Session> ref = reference ? reference->open_session() : nullptr;
  std::vector<double> kls;
  int64_t same_top = 0;
  for (size_t w0 = 0; w0 + 1 < ids.size(); w0 += (size_t)r.window) {
    size_t w1 = std::min(ids.size() - 1, w0 + (size_t)r.window);  // predicts ids[w0+1 .. w1]
    s->truncate(0);
    if (ref) ref->truncate(0);
    for (size_t p = w0; p < w1; p += (size_t)chunk) {
      if (cancelled && cancelled()) fail("scoring was cancelled");
      size_t n = std::min<size_t>((size_t)chunk, w1 - p);
      std::vector<int32_t> part(ids.begin() + p, ids.begin() + p + n);
      const std::vector<float>& logits = s->forward_all(part);
      const float* ref_logits = ref ? ref->forward_all(part).data() : nullptr;
      for (size_t i = 0; i < n; i++) {
        const float* l = logits.data() + i * (size_t)V;
        int32_t next = ids[p + i + 1];
        r.nll += log_partition(l, V) - (double)l[next];
        if (ref_logits) {
          const float* q = ref_logits + i * (size_t)V;
          kls.push_back(kl_divergence(q, l, V));
          same_top += kernels::argmax(q, V) == kernels::argmax(l, V);
        }
        std::string b = tok.token_bytes(next);
        r.bytes += (int64_t)b.size();
        for (unsigned char c : b) r.chars += (c & 0xC0) != 0x80;
        r.predicted++;
      }
    }
  }
  if (ref) {
    Divergence d;
    for (double k : kls) d.kl_mean += k / (double)kls.size();
    std::sort(kls.begin(), kls.end());
    d.kl_max = kls.back();
    d.kl_p99 = kls[std::min(kls.size() - 1, (size_t)(0.99 * (double)kls.size()))];
    d.same_top = (double)same_top / (double)kls.size();
    r.vs_reference = d;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace kvad
