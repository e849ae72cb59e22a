// Gradient checks: every layer's backward, and the whole model's, against central differences,
// all in float64 (the reference kernels), so the bounds can be tight (grad_check.h: every entry
// checked within 1e-6 relative).
// Then the float model (SIMD kernels, threads) against the float64 one.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "core/rng.h"
#include "core/threads.h"
#include "grad_check.h"
#include "train/layers.h"
#include "train/lora.h"
#include "train/model.h"
#include "random_values.h"

using namespace kvad;
using test::randn;
using namespace kvad::train;
using kvad::test::grad_check;

namespace {

// The float64 checks run thousands of tiny forwards: one thread, so a busy machine cannot stall
// them on the pool (FloatModelMatchesDouble runs the float model on all cores).
const int kOneThread = (set_threads(1), 0);

// The loss of a layer check: L = Σ out · g for a fixed random g, so dL/dout = g.
double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); i++) s += a[i] * b[i];
  return s;
}

}  // namespace

TEST(GradCheck, Linear) {
  Rng r(1);
  const int64_t rows = 5, in = 7, out = 6;
  auto x = randn<double>(r, rows * in), w = randn<double>(r, out * in), b = randn<double>(r, out), g = randn<double>(r, rows * out);
  auto loss = [&] {
    std::vector<double> y(rows * out);
    linear_fwd(y.data(), x.data(), w.data(), b.data(), rows, in, out);
    return dot(y, g);
  };
  std::vector<double> dx(rows * in), dw(out * in), db(out);
  linear_bwd(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), rows, in, out);
  grad_check("dx", x, dx, loss);
  grad_check("dw", w, dw, loss);
  grad_check("db", b, db, loss);
}

TEST(GradCheck, LayerNormAndRmsNorm) {
  for (bool layernorm : {true, false}) {
    Rng r(2);
    const int64_t rows = 4, C = 19;
    auto x = randn<double>(r, rows * C, 2.0), w = randn<double>(r, C), b = randn<double>(r, C), g = randn<double>(r, rows * C);
    auto loss = [&] {
      std::vector<double> y(rows * C), mean(rows), rstd(rows);
      norm_fwd(y.data(), mean.data(), rstd.data(), x.data(), w.data(), layernorm ? b.data() : nullptr, rows, C, 1e-5);
      return dot(y, g);
    };
    std::vector<double> y(rows * C), mean(rows), rstd(rows), dx(rows * C, 0.0), dw(C), db(C);
    norm_fwd(y.data(), mean.data(), rstd.data(), x.data(), w.data(), layernorm ? b.data() : nullptr, rows, C, 1e-5);
    norm_bwd(dx.data(), dw.data(), layernorm ? db.data() : nullptr, g.data(), x.data(),
             layernorm ? mean.data() : nullptr, rstd.data(), w.data(), rows, C);
    SCOPED_TRACE(layernorm ? "layernorm" : "rmsnorm");
    grad_check("dx", x, dx, loss);
    grad_check("dw", w, dw, loss);
    if (layernorm) grad_check("db", b, db, loss);
  }
}

TEST(GradCheck, CausalAttentionWithGroupedHeads) {
  // Multi-head (KV = H) and grouped (KV < H, incl. one shared head); T > 1 so the mask matters.
  for (auto [H, KV] : {std::pair<int64_t, int64_t>{2, 2}, {4, 2}, {3, 1}}) {
    Rng r(3 + H * 10 + KV);
    AttnShape s{2, 5, H, KV, 4};
    auto qkv = randn<double>(r, (size_t)(s.B * s.T * s.qkv_width())), g = randn<double>(r, (size_t)(s.B * s.T * H * s.hd));
    std::vector<double> out(g.size()), probs((size_t)(s.B * H * s.T * s.T));
    auto loss = [&] {
      attention_fwd(out.data(), probs.data(), qkv.data(), s);
      return dot(out, g);
    };
    loss();
    // The mask: no weight on the future, rows sum to one.
    for (int64_t i = 0; i < s.T; i++) {
      double sum = 0;
      for (int64_t j = 0; j < s.T; j++) {
        if (j > i) {
          EXPECT_EQ(probs[(size_t)(i * s.T + j)], 0.0);
        }
        sum += probs[(size_t)(i * s.T + j)];
      }
      EXPECT_NEAR(sum, 1.0, 1e-12);
    }
    std::vector<double> dqkv(qkv.size());
    attention_bwd(dqkv.data(), g.data(), qkv.data(), probs.data(), s);
    SCOPED_TRACE("H=" + std::to_string(H) + " KV=" + std::to_string(KV));
    grad_check("dqkv", qkv, dqkv, loss);
  }
  // Longer than one causal block (48 rows), with a ragged last block: a sample of the entries.
  Rng r(33);
  AttnShape s{1, 100, 2, 1, 4};
  auto qkv = randn<double>(r, (size_t)(s.B * s.T * s.qkv_width())), g = randn<double>(r, (size_t)(s.B * s.T * s.H * s.hd));
  std::vector<double> out(g.size()), probs((size_t)(s.B * s.H * s.T * s.T));
  auto loss = [&] {
    attention_fwd(out.data(), probs.data(), qkv.data(), s);
    return dot(out, g);
  };
  loss();
  std::vector<double> dqkv(qkv.size());
  attention_bwd(dqkv.data(), g.data(), qkv.data(), probs.data(), s);
  grad_check("dqkv (T=100)", qkv, dqkv, loss, 150);
}

TEST(GradCheck, Rope) {
  Rng r(4);
  AttnShape s{2, 6, 2, 1, 8};
  RopeTables<double> tab(s.T, s.hd, 10000.0);
  auto qkv = randn<double>(r, (size_t)(s.B * s.T * s.qkv_width())), g = randn<double>(r, qkv.size());
  auto loss = [&] {
    std::vector<double> y = qkv;
    rope_qk(y.data(), tab, s, false);
    return dot(y, g);
  };
  std::vector<double> d = g;
  rope_qk(d.data(), tab, s, true);
  grad_check("dx", qkv, d, loss);
  // v is untouched, and a rotation keeps lengths.
  std::vector<double> y = qkv;
  rope_qk(y.data(), tab, s, false);
  for (int64_t row = 0; row < s.B * s.T; row++)
    for (int64_t i = 0; i < s.KV * s.hd; i++) {
      size_t at = (size_t)(row * s.qkv_width() + (s.H + s.KV) * s.hd + i);
      EXPECT_EQ(y[at], qkv[at]);
    }
}

TEST(GradCheck, GeluAndSwiglu) {
  Rng r(5);
  const int64_t rows = 3, I = 9;
  auto x = randn<double>(r, rows * I, 2.0), g = randn<double>(r, rows * I);
  auto gelu_loss = [&] {
    std::vector<double> y(x.size());
    gelu_fwd(y.data(), x.data(), (int64_t)x.size());
    return dot(y, g);
  };
  std::vector<double> dx(x.size());
  gelu_bwd(dx.data(), x.data(), g.data(), (int64_t)x.size());
  grad_check("gelu", x, dx, gelu_loss);

  auto gu = randn<double>(r, rows * 2 * I, 2.0);
  auto swiglu_loss = [&] {
    std::vector<double> y(rows * I);
    swiglu_fwd(y.data(), gu.data(), rows, I);
    return dot(y, g);
  };
  std::vector<double> dgu(gu.size());
  swiglu_bwd(dgu.data(), gu.data(), g.data(), rows, I);
  grad_check("swiglu", gu, dgu, swiglu_loss);
}

TEST(GradCheck, EmbeddingWithPositions) {
  Rng r(6);
  const int64_t B = 2, T = 4, C = 3, V = 5;
  std::vector<int32_t> tok = {1, 3, 1, 0, 4, 1, 2, 2};  // repeats: the scatter must add
  auto wte = randn<double>(r, V * C), wpe = randn<double>(r, T * C), g = randn<double>(r, B * T * C);
  auto loss = [&] {
    std::vector<double> x(B * T * C);
    embedding_fwd(x.data(), tok.data(), wte.data(), wpe.data(), B, T, C, V);
    return dot(x, g);
  };
  std::vector<double> dwte(V * C, 0.0), dwpe(T * C);
  embedding_bwd(dwte.data(), dwpe.data(), g.data(), tok.data(), B, T, C);
  grad_check("dwte", wte, dwte, loss);
  grad_check("dwpe", wpe, dwpe, loss);
}

TEST(GradCheck, CrossEntropy) {
  // Rows 2 and 5 are not scored (target < 0: padding, a user token of a chat): the mean is over
  // the four scored rows, and the ignored rows' loss and dlogits are exactly 0.
  Rng r(7);
  const int64_t rows = 6, V = 11;
  auto logits = randn<double>(r, rows * V, 3.0);
  std::vector<int32_t> tgt = {0, 10, -1, 5, 3, -1};
  auto loss = [&] {
    std::vector<double> l = logits, per(rows);
    return cross_entropy(l.data(), per.data(), tgt.data(), rows, V);
  };
  std::vector<double> d = logits, per(rows);
  double mean = cross_entropy(d.data(), per.data(), tgt.data(), rows, V);
  double direct = 0;  // -log softmax by the definition
  int scored = 0;
  for (int64_t i = 0; i < rows; i++) {
    if (tgt[(size_t)i] < 0) continue;
    double z = 0;
    for (int64_t j = 0; j < V; j++) z += std::exp(logits[(size_t)(i * V + j)]);
    direct += std::log(z) - logits[(size_t)(i * V + tgt[(size_t)i])];
    scored++;
  }
  EXPECT_EQ(scored, 4);
  EXPECT_NEAR(mean, direct / scored, 1e-12);
  for (int64_t i : {2, 5}) {
    EXPECT_EQ(per[(size_t)i], 0.0);
    for (int64_t j = 0; j < V; j++) EXPECT_EQ(d[(size_t)(i * V + j)], 0.0) << i << "," << j;
  }
  grad_check("dlogits", logits, d, loss);
}

namespace {

// The loss and dlogits of a batch with unscored rows, and of the same batch with those rows
// removed: equal bit for bit (the scored rows' values), in T.
template <typename T>
void expect_ignored_rows_are_removed_rows(int threads) {
  set_threads(threads);
  Rng r(17);
  const int64_t rows = 40, V = 37;  // more rows than one thread's block of 16
  std::vector<T> logits((size_t)(rows * V));
  for (T& v : logits) v = (T)(3.0 * r.normal());
  std::vector<int32_t> tgt((size_t)rows);
  for (int32_t& t : tgt) t = r.uniform() < 0.4 ? -1 : (int32_t)r.below(V);
  tgt[0] = -1, tgt[rows - 1] = -1;
  std::vector<T> kept_logits;
  std::vector<int32_t> kept_tgt;
  for (int64_t i = 0; i < rows; i++)
    if (tgt[(size_t)i] >= 0) {
      kept_logits.insert(kept_logits.end(), logits.begin() + i * V, logits.begin() + (i + 1) * V);
      kept_tgt.push_back(tgt[(size_t)i]);
    }
  const int64_t kept = (int64_t)kept_tgt.size();
  ASSERT_GT(kept, 0);
  ASSERT_LT(kept, rows);
  std::vector<T> per((size_t)rows), kept_per((size_t)kept);
  double all = cross_entropy(logits.data(), per.data(), tgt.data(), rows, V);
  double removed = cross_entropy(kept_logits.data(), kept_per.data(), kept_tgt.data(), kept, V);
  EXPECT_EQ(all, removed);
  for (int64_t i = 0, k = 0; i < rows; i++) {
    const T* d = logits.data() + i * V;
    if (tgt[(size_t)i] < 0) {
      EXPECT_EQ(per[(size_t)i], (T)0);
      for (int64_t j = 0; j < V; j++) ASSERT_EQ(d[j], (T)0) << "row " << i;
      continue;
    }
    EXPECT_EQ(per[(size_t)i], kept_per[(size_t)k]);
    for (int64_t j = 0; j < V; j++) ASSERT_EQ(d[j], kept_logits[(size_t)(k * V + j)]) << "row " << i << "," << j;
    k++;
  }
  // No scored row at all: 0, no NaN, every dlogit 0.
  std::vector<int32_t> none((size_t)rows, -1);
  std::vector<T> l2((size_t)(rows * V), (T)1.5);
  EXPECT_EQ(cross_entropy(l2.data(), per.data(), none.data(), rows, V), 0.0);
  for (T v : l2) ASSERT_EQ(v, (T)0);
  for (T v : per) ASSERT_EQ(v, (T)0);
  set_threads(1);
}

}  // namespace

TEST(GradCheck, IgnoredTargetsEqualRemovedRows) {
  for (int threads : {1, 3}) {
    SCOPED_TRACE(threads);
    expect_ignored_rows_are_removed_rows<double>(threads);
    expect_ignored_rows_are_removed_rows<float>(threads);
  }
}

namespace {

struct Case {
  const char* name;
  ModelShape shape;
};

std::vector<Case> model_cases() {
  ModelShape gpt2;
  gpt2.arch = Arch::Gpt2, gpt2.vocab = 11, gpt2.layers = 2, gpt2.dim = 8, gpt2.heads = 2, gpt2.context = 6;
  ModelShape llama = gpt2;
  llama.arch = Arch::Llama, llama.heads = 4, llama.kv_heads = 2, llama.ffn = 12;  // grouped heads, hd 2
  ModelShape untied = llama;
  untied.tied = false, untied.kv_heads = 4;
  ModelShape qwen2 = llama;  // a base's shape: q/k/v biases, and more positions than the context
  qwen2.qkv_bias = true;
  ModelShape qwen3 = untied;  // q/k norms on heads wider than dim / heads
  qwen3.qk_norm = true, qwen3.head_size = 4, qwen3.kv_heads = 2;
  ModelShape gpt2_base = gpt2;  // a base's position table longer than the context trained at
  gpt2_base.positions = 9;
  return {{"gpt2 (tied)", gpt2},       {"llama (tied, grouped kv)", llama}, {"llama (untied)", untied},
          {"qwen2 (q/k/v biases)", qwen2}, {"qwen3 (q/k norms, head size 4)", qwen3}, {"gpt2 (9 positions)", gpt2_base}};
}

// Tokens and next-token targets for B sequences of T.
void batch(Rng& r, int64_t B, int64_t T, int64_t V, std::vector<int32_t>& x, std::vector<int32_t>& y) {
  x.resize((size_t)(B * T)), y.resize((size_t)(B * T));
  for (size_t i = 0; i < x.size(); i++) x[i] = (int32_t)r.below((uint64_t)V), y[i] = (int32_t)r.below((uint64_t)V);
}

}  // namespace

TEST(GradCheck, WholeModel) {
  for (const Case& c : model_cases()) {
    SCOPED_TRACE(c.name);
    const int64_t B = 2, T = 5;  // T < context: positions past T get no gradient
    Model<double> m(c.shape, B);
    m.init(42);
    // Larger-than-init weights so every path carries a visible gradient (norm weights stay ~1).
    Rng r(9);
    for (const ParamInfo& p : m.layout().tensors)
      for (int64_t i = 0; i < p.size; i++) m.params()[p.offset + i] += p.init_std != 0 ? 0.3 * r.normal() : 0.1 * r.normal();
    std::vector<int32_t> x, y;
    batch(r, B, T, c.shape.vocab, x, y);
    m.forward(x.data(), y.data(), B, T);
    m.backward();
    std::vector<double> grads(m.grads(), m.grads() + m.num_params());
    std::vector<double> params(m.params(), m.params() + m.num_params());
    auto loss = [&] {
      std::copy(params.begin(), params.end(), m.params());
      return m.forward(x.data(), y.data(), B, T);
    };
    for (const ParamInfo& p : m.layout().tensors) {
      std::vector<double> sub(params.begin() + p.offset, params.begin() + p.offset + p.size);
      std::vector<double> an(grads.begin() + p.offset, grads.begin() + p.offset + p.size);
      // Check each tensor through a view of the flat buffer.
      auto sub_loss = [&] {
        std::copy(sub.begin(), sub.end(), params.begin() + p.offset);
        return loss();
      };
      grad_check(p.name.c_str(), sub, an, sub_loss, 24);
      std::copy(sub.begin(), sub.end(), params.begin() + p.offset);
    }
  }
}

TEST(GradCheck, FloatModelMatchesDouble) {
  set_threads(0);
  for (const Case& c : model_cases()) {
    SCOPED_TRACE(c.name);
    ModelShape s = c.shape;
    s.dim = 32, s.ffn = s.arch == Arch::Gpt2 ? 0 : 80, s.context = 50, s.vocab = 37, s.positions = 0;
    s.heads = 4, s.kv_heads = c.shape.kv_heads == 0 || c.shape.kv_heads == c.shape.heads ? 4 : 2;
    const int64_t B = 3, T = 50;  // several 12-row tiles: the causal triangles matter
    Model<double> md(s, B);
    Model<float> mf(s, B);
    md.init(7);
    for (int64_t i = 0; i < md.num_params(); i++) mf.params()[i] = (float)md.params()[i];
    for (int64_t i = 0; i < md.num_params(); i++) md.params()[i] = (double)mf.params()[i];  // same values
    Rng r(11);
    std::vector<int32_t> x, y;
    batch(r, B, T, s.vocab, x, y);
    double ld = md.forward(x.data(), y.data(), B, T), lf = mf.forward(x.data(), y.data(), B, T);
    EXPECT_NEAR(lf, ld, 1e-5 * ld);
    md.backward();
    mf.backward();
    // Per tensor: |g_f32 - g_f64| <= 2e-3 * max|g_f64| + 1e-7.
    for (const ParamInfo& p : md.layout().tensors) {
      double mx = 0, worst = 0;
      for (int64_t i = 0; i < p.size; i++) mx = std::max(mx, std::fabs(md.grads()[p.offset + i]));
      for (int64_t i = 0; i < p.size; i++)
        worst = std::max(worst, std::fabs(mf.grads()[p.offset + i] - md.grads()[p.offset + i]));
      EXPECT_LE(worst, 2e-3 * mx + 1e-7) << p.name << " max|g| " << mx;
    }
  }
}

// The adapted model: a LoRA pair on every projection of every case (fused q/k/v and gate/up
// slices, GPT-2's c_attn and both c_proj, Qwen2's biased and Qwen3's normed q/k), with some targets
// ignored (-1, as chat masks make them): the adapter's gradients against central differences,
// and the frozen base gets none.
TEST(GradCheck, WholeAdaptedModel) {
  for (const Case& c : model_cases()) {
    SCOPED_TRACE(c.name);
    const int64_t B = 2, T = 5;
    LoraConfig cfg;
    cfg.rank = 2, cfg.alpha = 3, cfg.targets = {"all-linear"};
    LoraLayout lora = make_lora_layout(c.shape, cfg);
    Model<double> m(c.shape, B, &lora);
    m.init(42);
    Rng r(9);
    for (int64_t i = 0; i < m.num_params(); i++) m.params()[i] += 0.3 * r.normal();
    EXPECT_EQ(m.num_trainable(), lora.total());
    EXPECT_EQ(m.grads(), nullptr);  // no gradient buffer for the frozen base
    // Non-zero A and B: a fresh adapter (B = 0) would leave A's gradient zero.
    for (int64_t i = 0; i < lora.total(); i++) m.trainable()[i] = 0.5 * r.normal();
    std::vector<int32_t> x, y;
    batch(r, B, T, c.shape.vocab, x, y);
    y[1] = y[7] = -1;  // not scored
    m.forward(x.data(), y.data(), B, T);
    m.backward();
    std::vector<double> grads(m.trainable_grads(), m.trainable_grads() + lora.total());
    std::vector<double> adapter(m.trainable(), m.trainable() + lora.total());
    std::vector<double> base(m.params(), m.params() + m.num_params());
    auto loss = [&] {
      std::copy(adapter.begin(), adapter.end(), m.trainable());
      return m.forward(x.data(), y.data(), B, T);
    };
    for (const ParamInfo& p : lora.params.tensors) {
      std::vector<double> sub(adapter.begin() + p.offset, adapter.begin() + p.offset + p.size);
      std::vector<double> an(grads.begin() + p.offset, grads.begin() + p.offset + p.size);
      auto sub_loss = [&] {
        std::copy(sub.begin(), sub.end(), adapter.begin() + p.offset);
        return loss();
      };
      grad_check(p.name.c_str(), sub, an, sub_loss, 12);
      std::copy(sub.begin(), sub.end(), adapter.begin() + p.offset);
    }
    EXPECT_TRUE(std::equal(base.begin(), base.end(), m.params())) << "the frozen base changed";
  }
}

// Data-parallel training (distributed.h): ranks run contiguous shares of a batch's rows, each
// loss divided by the whole batch's count of scored targets (forward's scored_total), and add their
// gradients. The shares' losses and gradients sum to the whole batch's, in float64 to rounding,
// for every model and for an adapter, with unscored targets spread unevenly between the shares
// (as chat masks make them). Divided by each share's own count instead, they would not.
TEST(GradCheck, SharesOfABatchSumToTheBatch) {
  for (const Case& c : model_cases()) {
    for (bool adapted : {false, true}) {
      SCOPED_TRACE(std::string(c.name) + (adapted ? " + adapter" : ""));
      const int64_t B = 4, T = 5, half = B / 2;
      LoraConfig cfg;
      cfg.rank = 2, cfg.alpha = 3, cfg.targets = {"all-linear"};
      LoraLayout lora = make_lora_layout(c.shape, cfg);
      Model<double> whole(c.shape, B, adapted ? &lora : nullptr), part(c.shape, half, adapted ? &lora : nullptr);
      whole.init(42);
      Rng r(13);
      for (int64_t i = 0; i < whole.num_params(); i++) whole.params()[i] += 0.3 * r.normal();
      if (adapted)
        for (int64_t i = 0; i < whole.num_trainable(); i++) whole.trainable()[i] = 0.5 * r.normal();
      std::copy(whole.params(), whole.params() + whole.num_params(), part.params());
      std::copy(whole.trainable(), whole.trainable() + whole.num_trainable(), part.trainable());
      std::vector<int32_t> x, y;
      batch(r, B, T, c.shape.vocab, x, y);
      y[0] = y[2] = y[3] = y[6] = -1;  // the first share scores 6 targets, the second 10
      int64_t scored = 0;
      for (int32_t t : y) scored += t >= 0;
      const double loss = whole.forward(x.data(), y.data(), B, T);
      whole.backward();
      const int64_t n = whole.num_trainable();
      std::vector<double> sum((size_t)n, 0.0), own((size_t)n, 0.0);
      double loss_sum = 0, own_loss = 0;
      for (int64_t share = 0; share < 2; share++) {
        const int32_t* xs = x.data() + share * half * T;
        const int32_t* ys = y.data() + share * half * T;
        loss_sum += part.forward(xs, ys, half, T, scored);
        part.backward();
        for (int64_t i = 0; i < n; i++) sum[(size_t)i] += part.trainable_grads()[i];
        own_loss += part.forward(xs, ys, half, T);  // each share's own count
        part.backward();
        for (int64_t i = 0; i < n; i++) own[(size_t)i] += part.trainable_grads()[i];
      }
      EXPECT_NEAR(loss_sum, loss, 1e-13 * loss);
      double worst = 0, own_worst = 0, mx = 0;
      for (int64_t i = 0; i < n; i++) {
        mx = std::max(mx, std::fabs(whole.trainable_grads()[i]));
        worst = std::max(worst, std::fabs(sum[(size_t)i] - whole.trainable_grads()[i]));
        own_worst = std::max(own_worst, std::fabs(own[(size_t)i] - whole.trainable_grads()[i]));
      }
      EXPECT_LE(worst, 1e-13 * mx);
      EXPECT_GT(own_worst, 0.1 * mx);  // the shares' own means: a different gradient
      EXPECT_GT(std::fabs(own_loss - loss), 0.1 * loss);
    }
  }
}

// An adapter changes the loss exactly as merging it into the base's weights does (lora_merge).
TEST(GradCheck, AdaptedModelEqualsMergedBase) {
  for (const Case& c : model_cases()) {
    SCOPED_TRACE(c.name);
    const int64_t B = 2, T = 6;
    LoraConfig cfg;
    cfg.rank = 3, cfg.alpha = 5, cfg.rslora = true, cfg.targets = {"all-linear"};
    LoraLayout lora = make_lora_layout(c.shape, cfg);
    Model<double> adapted(c.shape, B, &lora), merged(c.shape, B);
    adapted.init(1);
    Rng r(2);
    for (int64_t i = 0; i < lora.total(); i++) adapted.trainable()[i] = 0.5 * r.normal();
    std::copy(adapted.params(), adapted.params() + adapted.num_params(), merged.params());
    lora_merge(merged.params(), merged.layout(), lora, adapted.trainable());
    std::vector<int32_t> x, y;
    batch(r, B, T, c.shape.vocab, x, y);
    double la = adapted.forward(x.data(), y.data(), B, T), lm = merged.forward(x.data(), y.data(), B, T);
    EXPECT_NEAR(la, lm, 1e-12 * std::fabs(lm));
    double plain = Model<double>(c.shape, B).forward(x.data(), y.data(), B, T);  // zeros: a sanity floor
    EXPECT_NE(la, plain);
  }
}
