#include "train/model.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/rng.h"
#include "train/lora.h"
#include "train/profile.h"

namespace kvad::train {

const char* arch_name(Arch a) { return a == Arch::Gpt2 ? "gpt2" : "llama"; }

void ModelShape::finalize() {
  if (vocab < 1) fail("the vocabulary is empty");
  if (layers < 1 || dim < 1 || heads < 1 || context < 1) fail("layers, dim, heads and context must be positive");
  if (head_size < 0) fail("the head size must be positive");
  if (!head_size && dim % heads) fail("--dim ({}) must be a multiple of --heads ({})", dim, heads);
  if (positions == 0) positions = context;
  if (positions < context) fail("a context of {} needs {} position embeddings, the model has {}", context, context, positions);
  if (kv_heads < 1) kv_heads = heads;
  if (heads % kv_heads) fail("--heads ({}) must be a multiple of --kv-heads ({})", heads, kv_heads);
  if (arch == Arch::Gpt2) {
    if (kv_heads != heads) fail("GPT-2 has no grouped key/value heads: use --arch llama for --kv-heads");
    if (!tied) fail("a GPT-2 checkpoint ties the output head to the token embedding: use --arch llama for --untied");
    if (ffn == 0) ffn = 4 * dim;
    if (head_size && head_size * heads != dim) fail("GPT-2's heads split the width: head size {} x {} heads != {}", head_size, heads, dim);
    if (qkv_bias || qk_norm) fail("q/k/v biases and q/k norms are options of the Llama-style architecture");
  } else {
    if (head_dim() % 2) fail("RoPE needs an even head dimension, got {} (--dim / --heads)", head_dim());
    // SwiGLU has three matrices where GELU's MLP has two: 8/3 * dim keeps the parameter count,
    // rounded up to a multiple of 32 for the kernels.
    if (ffn == 0) ffn = (8 * dim / 3 + 31) / 32 * 32;
  }
  if (ffn < 1) fail("the MLP width must be positive");
}

const ParamInfo& ParamLayout::find(const std::string& name) const {
  for (const ParamInfo& p : tensors)
    if (p.name == name) return p;
  fail("no parameter named {}", name);
}

ParamLayout make_layout(const ModelShape& s) {
  ParamLayout L;
  const int64_t C = s.dim;
  const float std_ = 0.02f, std_out = (float)(0.02 / std::sqrt(2.0 * (double)s.layers));
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float init) {
    ParamInfo p;
    p.name = name;
    p.shape = std::move(shape);
    p.size = 1;
    for (int64_t d : p.shape) p.size *= d;
    p.offset = L.total;
    p.decay = p.shape.size() == 2;
    p.init_std = init;
    L.total += p.size;
    L.tensors.push_back(p);
    return p.offset;
  };
  const bool gpt2 = s.arch == Arch::Gpt2;
  L.wte = add("wte", {s.vocab, C}, std_);
  if (gpt2) L.wpe = add("wpe", {s.positions, C}, std_);
  for (int64_t l = 0; l < s.layers; l++) {
    std::string p = "h." + std::to_string(l) + ".";
    LayerParams lp;
    lp.ln1_w = add(p + "ln_1.weight", {C}, -1);
    if (gpt2) lp.ln1_b = add(p + "ln_1.bias", {C}, 0);
    lp.qkv_w = add(p + "attn.qkv.weight", {s.qkv_dim(), C}, std_);
    if (gpt2 || s.qkv_bias) lp.qkv_b = add(p + "attn.qkv.bias", {s.qkv_dim()}, 0);
    if (s.qk_norm) {
      lp.q_norm = add(p + "attn.q_norm.weight", {s.head_dim()}, -1);
      lp.k_norm = add(p + "attn.k_norm.weight", {s.head_dim()}, -1);
    }
    lp.proj_w = add(p + "attn.proj.weight", {C, s.q_dim()}, std_out);
    if (gpt2) lp.proj_b = add(p + "attn.proj.bias", {C}, 0);
    lp.ln2_w = add(p + "ln_2.weight", {C}, -1);
    if (gpt2) lp.ln2_b = add(p + "ln_2.bias", {C}, 0);
    lp.fc_w = add(p + "mlp.fc.weight", {s.ffn_in(), C}, std_);
    if (gpt2) lp.fc_b = add(p + "mlp.fc.bias", {s.ffn_in()}, 0);
    lp.fc2_w = add(p + "mlp.fc2.weight", {C, s.ffn}, std_out);
    if (gpt2) lp.fc2_b = add(p + "mlp.fc2.bias", {C}, 0);
    L.layers.push_back(lp);
  }
  L.lnf_w = add("ln_f.weight", {C}, -1);
  if (gpt2) L.lnf_b = add("ln_f.bias", {C}, 0);
  if (!s.tied) L.head = add("lm_head.weight", {s.vocab, C}, std_);
  return L;
}

// Everything the forward keeps for the backward, and the backward's scratch, in one allocation.
template <typename T>
struct Model<T>::Acts {
  struct Layer {
    T *ln1, *ln1_mean, *ln1_rstd, *qkv, *qk_in, *qk_rstd, *probs, *atty, *res_mid, *ln2, *ln2_mean, *ln2_rstd, *fch,
        *fch_act;
  };
  std::vector<T> buf;
  std::vector<T*> res;  // residual stream entering block l (res[layers] = after the last block)
  std::vector<Layer> layer;
  T *lnf, *lnf_mean, *lnf_rstd, *logits, *losses;
  T *dres, *dln, *dqkv, *datty, *dfch, *dfch_act, *qk_scratch;

  // Lays the buffers out (or, with base == nullptr, only counts them).
  static int64_t plan(const ModelShape& s, int64_t max_batch, Acts* a) {
    const int64_t BT = max_batch * s.context, C = s.dim;
    int64_t n = 0;
    auto take = [&](T** p, int64_t count) {
      if (a) *p = a->buf.data() + n;
      n += (count + 15) / 16 * 16;  // keep every buffer 64-byte aligned relative to the base
    };
    if (a) a->res.resize((size_t)s.layers + 1), a->layer.resize((size_t)s.layers);
    T* dummy;
    for (int64_t l = 0; l <= s.layers; l++) take(a ? &a->res[(size_t)l] : &dummy, BT * C);
    for (int64_t l = 0; l < s.layers; l++) {
      Layer tmp, &L = a ? a->layer[(size_t)l] : tmp;
      take(&L.ln1, BT * C), take(&L.ln1_mean, BT), take(&L.ln1_rstd, BT);
      take(&L.qkv, BT * s.qkv_dim()), take(&L.probs, max_batch * s.heads * s.context * s.context);
      const int64_t qk_heads = s.qk_norm ? s.heads + s.kv_heads : 0;
      take(&L.qk_in, BT * qk_heads * s.head_dim()), take(&L.qk_rstd, BT * qk_heads);
      take(&L.atty, BT * s.q_dim()), take(&L.res_mid, BT * C);
      take(&L.ln2, BT * C), take(&L.ln2_mean, BT), take(&L.ln2_rstd, BT);
      take(&L.fch, BT * s.ffn_in()), take(&L.fch_act, BT * s.ffn);
    }
    Acts tmp, &A = a ? *a : tmp;
    take(&A.lnf, BT * C), take(&A.lnf_mean, BT), take(&A.lnf_rstd, BT);
    take(&A.logits, BT * s.vocab), take(&A.losses, BT);
    take(&A.dres, BT * C), take(&A.dln, BT * C), take(&A.dqkv, BT * s.qkv_dim());
    take(&A.datty, BT * s.q_dim()), take(&A.dfch, BT * s.ffn_in()), take(&A.dfch_act, BT * s.ffn);
    take(&A.qk_scratch, s.qk_norm ? 2 * BT * (s.heads + s.kv_heads) * s.head_dim() : 0);
    return n;
  }
};

template <typename T>
uint64_t Model<T>::training_bytes(const ModelShape& shape, int64_t max_batch, const LoraLayout* lora) {
  ModelShape s = shape;
  s.finalize();
  const uint64_t base = (uint64_t)make_layout(s).total, acts = (uint64_t)Acts::plan(s, max_batch, nullptr);
  if (!lora) return sizeof(T) * (4 * base + acts);  // parameters, gradients, AdamW's two moments
  // A frozen base: its parameters only; the adapter's four copies and its kept products.
  const uint64_t rows = (uint64_t)(max_batch * s.context), r = (uint64_t)lora->config.rank;
  return sizeof(T) * (base + 4 * (uint64_t)lora->total() + acts + (lora->pieces.size() + 1) * rows * r);
}

template <typename T>
Model<T>::Model(const ModelShape& shape, int64_t max_batch, const LoraLayout* lora)
    : shape_(shape), max_batch_(max_batch), lora_(lora) {
  shape_.finalize();
  if (max_batch < 1) fail("the batch must hold at least one sequence");
  layout_ = make_layout(shape_);
  params_.assign((size_t)layout_.total, T(0));
  if (lora_) {
    if (lora_->shape.dim != shape_.dim || lora_->shape.layers != shape_.layers || lora_->shape.qkv_dim() != shape_.qkv_dim() ||
        lora_->shape.ffn != shape_.ffn)
      fail("the adapter's layout was made for another model shape");
    const int64_t rows = max_batch * shape_.context, r = lora_->config.rank;
    adapter_.assign((size_t)lora_->total(), T(0));
    adapter_grads_.assign((size_t)lora_->total(), T(0));
    lora_t_.assign(lora_->pieces.size() * (size_t)(rows * r), T(0));
    lora_dt_.assign((size_t)(rows * r), T(0));
  } else {
    grads_.assign((size_t)layout_.total, T(0));
  }
  acts_ = std::make_unique<Acts>();
  acts_->buf.assign((size_t)Acts::plan(shape_, max_batch, nullptr), T(0));
  Acts::plan(shape_, max_batch, acts_.get());
  if (shape_.arch == Arch::Llama)
    rope_ = std::make_unique<RopeTables<T>>(shape_.context, shape_.head_dim(), shape_.rope_theta, shape_.rope_inv_freq);
}

template <typename T>
Model<T>::~Model() = default;

template <typename T>
void Model<T>::init(uint64_t seed) {
  Rng rng(seed);
  for (const ParamInfo& p : layout_.tensors) {
    T* v = params_.data() + p.offset;
    for (int64_t i = 0; i < p.size; i++)
      v[i] = p.init_std > 0 ? (T)((double)p.init_std * rng.normal()) : p.init_std < 0 ? T(1) : T(0);
  }
}

template <typename T>
const T* Model<T>::logits() const {
  return acts_->logits;
}

template <typename T>
const ParamLayout& Model<T>::trainable_layout() const {
  return lora_ ? lora_->params : layout_;
}

// A piece's t = s x Aᵀ as the forward kept it for the backward: [max_batch * context, r] each.
template <typename T>
T* Model<T>::kept_product(const LoraPiece& p) {
  const size_t piece = (size_t)(&p - lora_->pieces.data());
  return lora_t_.data() + piece * (size_t)(max_batch_ * shape_.context * lora_->config.rank);
}

// The adapter's side paths of one site (LoraSite) of a layer, after the site's base product:
// y [rows, site width] += s (x Aᵀ) Bᵀ on each adapted module's columns.
template <typename T>
void Model<T>::lora_forward(int64_t layer, int site, T* y, const T* x) {
  if (!lora_) return;
  const int64_t rows = B_ * T_, r = lora_->config.rank;
  for (const LoraPiece& p : lora_->at(layer, (LoraSite)site)) {
    lora_fwd<T>(y + p.out0, p.ldy, kept_product(p), x, adapter_.data() + p.a, adapter_.data() + p.b, rows, p.in, p.out, r,
                (T)lora_->scale());
  }
}

// Their backward: the adapter's gradients, and dx += what flows back through them.
template <typename T>
void Model<T>::lora_backward(int64_t layer, int site, T* dx, const T* dy, const T* x) {
  if (!lora_) return;
  const int64_t rows = B_ * T_, r = lora_->config.rank;
  for (const LoraPiece& p : lora_->at(layer, (LoraSite)site)) {
    lora_bwd<T>(dx, adapter_grads_.data() + p.a, adapter_grads_.data() + p.b, lora_dt_.data(), dy + p.out0, p.ldy,
                x, kept_product(p), adapter_.data() + p.a, adapter_.data() + p.b, rows, p.in, p.out, r, (T)lora_->scale());
  }
}

template <typename T>
double Model<T>::forward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t Tn, int64_t scored_total) {
  const ModelShape& s = shape_;
  if (B < 1 || B > max_batch_ || Tn < 1 || Tn > s.context)
    fail("forward of {} x {} tokens does not fit the model's {} x {}", B, Tn, max_batch_, s.context);
  for (int64_t i = 0; i < B * Tn; i++)
    if (tokens[i] < 0 || tokens[i] >= s.vocab || (targets && (targets[i] < -1 || targets[i] >= s.vocab)))
      fail("token id out of range for the vocabulary of {}", s.vocab);
  B_ = B, T_ = Tn;
  tokens_.assign(tokens, tokens + B * Tn);
  Acts& a = *acts_;
  const ParamLayout& L = layout_;
  auto P = [&](int64_t off) -> const T* { return off < 0 ? nullptr : params_.data() + off; };
  const int64_t BT = B * Tn, C = s.dim;
  const AttnShape as{B, Tn, s.heads, s.kv_heads, s.head_dim()};
  const bool gpt2 = s.arch == Arch::Gpt2;

  {
    PhaseTimer t("fwd embedding");
    embedding_fwd(a.res[0], tokens, P(L.wte), P(L.wpe), B, Tn, C, s.vocab);
  }
  for (int64_t l = 0; l < s.layers; l++) {
    const LayerParams& w = L.layers[(size_t)l];
    auto& A = a.layer[(size_t)l];
    {
      PhaseTimer t("fwd norm");
      norm_fwd(A.ln1, A.ln1_mean, A.ln1_rstd, a.res[l], P(w.ln1_w), P(w.ln1_b), BT, C, (T)s.norm_eps);
    }
    {
      PhaseTimer t("fwd qkv");
      linear_fwd(A.qkv, A.ln1, P(w.qkv_w), P(w.qkv_b), BT, C, s.qkv_dim());
      lora_forward(l, (int)LoraSite::Qkv, A.qkv, A.ln1);
      if (s.qk_norm) qk_norm_fwd(A.qkv, A.qk_in, A.qk_rstd, a.qk_scratch, P(w.q_norm), P(w.k_norm), as, (T)s.norm_eps);
      if (!gpt2) rope_qk(A.qkv, *rope_, as, false);
    }
    {
      PhaseTimer t("fwd attention");
      attention_fwd(A.atty, A.probs, A.qkv, as);
    }
    {
      PhaseTimer t("fwd proj");
      // res_mid = res + atty projᵀ + b: the product accumulates onto a copy of the stream.
      std::memcpy(A.res_mid, a.res[l], sizeof(T) * (size_t)(BT * C));
      linear_fwd(A.res_mid, A.atty, P(w.proj_w), P(w.proj_b), BT, s.q_dim(), C, true);
      lora_forward(l, (int)LoraSite::Proj, A.res_mid, A.atty);
    }
    {
      PhaseTimer t("fwd norm");
      norm_fwd(A.ln2, A.ln2_mean, A.ln2_rstd, A.res_mid, P(w.ln2_w), P(w.ln2_b), BT, C, (T)s.norm_eps);
    }
    {
      PhaseTimer t("fwd fc");
      linear_fwd(A.fch, A.ln2, P(w.fc_w), P(w.fc_b), BT, C, s.ffn_in());
      lora_forward(l, (int)LoraSite::Fc, A.fch, A.ln2);
    }
    {
      PhaseTimer t("fwd activation");
      if (gpt2) gelu_fwd(A.fch_act, A.fch, BT * s.ffn);
      else swiglu_fwd(A.fch_act, A.fch, BT, s.ffn);
    }
    {
      PhaseTimer t("fwd fc2");
      std::memcpy(a.res[l + 1], A.res_mid, sizeof(T) * (size_t)(BT * C));
      linear_fwd(a.res[l + 1], A.fch_act, P(w.fc2_w), P(w.fc2_b), BT, s.ffn, C, true);
      lora_forward(l, (int)LoraSite::Fc2, a.res[l + 1], A.fch_act);
    }
  }
  PhaseTimer t("fwd head+loss");
  norm_fwd(a.lnf, a.lnf_mean, a.lnf_rstd, a.res[s.layers], P(L.lnf_w), P(L.lnf_b), BT, C, (T)s.norm_eps);
  linear_fwd<T>(a.logits, a.lnf, P(L.head >= 0 ? L.head : L.wte), nullptr, BT, C, s.vocab);
  if (!targets) return 0;
  return cross_entropy(a.logits, a.losses, targets, BT, s.vocab, scored_total);
}

template <typename T>
void Model<T>::backward() {
  const ModelShape& s = shape_;
  if (B_ == 0) fail("backward() without a forward with targets");
  Acts& a = *acts_;
  const ParamLayout& L = layout_;
  auto P = [&](int64_t off) -> const T* { return off < 0 ? nullptr : params_.data() + off; };
  // A frozen base (under LoRA) has no gradients: every null G skips a parameter gradient.
  auto G = [&](int64_t off) -> T* { return off < 0 || lora_ ? nullptr : grads_.data() + off; };
  // LayerNorm keeps its means; RMSNorm (Llama) has none, and norm_bwd tells them apart by that.
  auto mean = [&](const T* m) -> const T* { return s.arch == Arch::Gpt2 ? m : nullptr; };
  const int64_t B = B_, Tn = T_, BT = B * Tn, C = s.dim;
  const AttnShape as{B, Tn, s.heads, s.kv_heads, s.head_dim()};
  const bool gpt2 = s.arch == Arch::Gpt2;
  const int64_t head = L.head >= 0 ? L.head : L.wte;

  {
    PhaseTimer t("bwd head");
    // Head and final norm. a.logits holds dlogits (cross_entropy replaced them).
    linear_bwd<T>(a.dln, G(head), nullptr, a.logits, a.lnf, P(head), BT, C, s.vocab);
    std::memset(a.dres, 0, sizeof(T) * (size_t)(BT * C));
    norm_bwd(a.dres, G(L.lnf_w), G(L.lnf_b), a.dln, a.res[s.layers], mean(a.lnf_mean), a.lnf_rstd, P(L.lnf_w), BT, C);
  }

  for (int64_t l = s.layers - 1; l >= 0; l--) {
    const LayerParams& w = L.layers[(size_t)l];
    auto& A = a.layer[(size_t)l];
    // MLP branch: res[l+1] = res_mid + fc2(act(fc(ln2(res_mid)))). dres flows on to res_mid as is.
    {
      PhaseTimer t("bwd fc2");
      linear_bwd(a.dfch_act, G(w.fc2_w), G(w.fc2_b), a.dres, A.fch_act, P(w.fc2_w), BT, s.ffn, C);
      lora_backward(l, (int)LoraSite::Fc2, a.dfch_act, a.dres, A.fch_act);
    }
    {
      PhaseTimer t("bwd activation");
      if (gpt2) gelu_bwd(a.dfch, A.fch, a.dfch_act, BT * s.ffn);
      else swiglu_bwd(a.dfch, A.fch, a.dfch_act, BT, s.ffn);
    }
    {
      PhaseTimer t("bwd fc");
      linear_bwd(a.dln, G(w.fc_w), G(w.fc_b), a.dfch, A.ln2, P(w.fc_w), BT, C, s.ffn_in());
      lora_backward(l, (int)LoraSite::Fc, a.dln, a.dfch, A.ln2);
    }
    {
      PhaseTimer t("bwd norm");
      norm_bwd(a.dres, G(w.ln2_w), G(w.ln2_b), a.dln, A.res_mid, mean(A.ln2_mean), A.ln2_rstd, P(w.ln2_w), BT, C);
    }
    {
      PhaseTimer t("bwd proj");
      // Attention branch: res_mid = res[l] + proj(attn(ln1(res[l]))).
      linear_bwd(a.datty, G(w.proj_w), G(w.proj_b), a.dres, A.atty, P(w.proj_w), BT, s.q_dim(), C);
      lora_backward(l, (int)LoraSite::Proj, a.datty, a.dres, A.atty);
    }
    {
      PhaseTimer t("bwd attention");
      attention_bwd(a.dqkv, a.datty, A.qkv, A.probs, as);
    }
    {
      PhaseTimer t("bwd qkv");
      if (!gpt2) rope_qk(a.dqkv, *rope_, as, true);
      if (s.qk_norm) qk_norm_bwd(a.dqkv, G(w.q_norm), G(w.k_norm), a.qk_scratch, A.qk_in, A.qk_rstd, P(w.q_norm),
                                 P(w.k_norm), as);
      linear_bwd(a.dln, G(w.qkv_w), G(w.qkv_b), a.dqkv, A.ln1, P(w.qkv_w), BT, C, s.qkv_dim());
      lora_backward(l, (int)LoraSite::Qkv, a.dln, a.dqkv, A.ln1);
    }
    {
      PhaseTimer t("bwd norm");
      norm_bwd(a.dres, G(w.ln1_w), G(w.ln1_b), a.dln, a.res[l], mean(A.ln1_mean), A.ln1_rstd, P(w.ln1_w), BT, C);
    }
  }
  if (lora_) return;  // the embedding is frozen: nothing below it learns
  PhaseTimer t("bwd embedding");
  // Embeddings: the tied table already holds the head's gradient; a separate one starts at zero.
  if (L.head >= 0) std::memset(G(L.wte), 0, sizeof(T) * (size_t)(s.vocab * C));
  if (L.wpe >= 0 && Tn < s.positions)  // positions this batch did not reach get no gradient
    std::memset(G(L.wpe) + Tn * C, 0, sizeof(T) * (size_t)((s.positions - Tn) * C));
  embedding_bwd(G(L.wte), G(L.wpe), a.dres, tokens_.data(), B, Tn, C);
}

template class Model<float>;
template class Model<double>;

}  // namespace kvad::train
