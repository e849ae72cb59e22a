// The trainable GPT: a GPT-2-style or a Llama-style decoder, its parameters in one flat buffer
// (so the optimiser, the gradient norm and checkpoints see one array), forward with the loss and
// a backward pass that walks the layers of layers.h in reverse.
//
//   GPT-2  x = wte[tok] + wpe[t];  per block: x += proj(attn(LN(x))); x += fc2(gelu(fc1(LN(x))))
//   Llama  x = wte[tok];           per block: x += o(attn(rope(q,k), v of RMSNorm(x)));
//                                             x += down(silu(gate(h)) * up(h)), h = RMSNorm(x)
//          Qwen2 adds biases to q, k, v; Qwen3 RMS-normalises each head of q and k before rope.
//   logits = head(norm(x)), head tied to wte or separate; loss = cross-entropy.
// The same model fine-tunes a Hugging Face base (base.h) with its weights frozen: then only a
// LoRA adapter's side paths (lora.h) learn, and the base's parameters get no gradients.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "train/layers.h"

namespace kvad::train {

enum class Arch { Gpt2, Llama };
const char* arch_name(Arch a);

struct ModelShape {
  Arch arch = Arch::Gpt2;
  int64_t vocab = 0, layers = 4, dim = 128, heads = 4, kv_heads = 0;  // kv_heads 0 = heads
  int64_t ffn = 0;      // MLP hidden width: GPT-2 4*dim, Llama's SwiGLU ~8/3*dim by default
  int64_t context = 128;
  bool tied = true;     // output head = token embedding
  double norm_eps = 1e-5, rope_theta = 10000;
  int64_t head_size = 0;   // 0 = dim / heads (Qwen3 sets it apart: 16 heads of 128 on a dim of 1024)
  int64_t positions = 0;   // GPT-2's learned position table rows; 0 = context (a base keeps its own)
  bool qkv_bias = false;   // Llama-style with q/k/v biases (Qwen2); GPT-2 always has biases
  bool qk_norm = false;    // per-head RMSNorm of q and k (Qwen3)
  std::vector<double> rope_inv_freq;  // a base's scaled rope frequencies [head_dim / 2]; empty = theta's

  int64_t head_dim() const { return head_size ? head_size : dim / heads; }
  int64_t q_dim() const { return heads * head_dim(); }
  int64_t kv_dim() const { return kv_heads * head_dim(); }
  int64_t qkv_dim() const { return q_dim() + 2 * kv_dim(); }
  // Width of the MLP's first product (GPT-2: ffn; Llama: gate and up side by side) and its output.
  int64_t ffn_in() const { return arch == Arch::Gpt2 ? ffn : 2 * ffn; }
  // Fills defaults (ffn) and throws on an impossible combination.
  void finalize();
};

// One parameter tensor inside the flat buffer.
struct ParamInfo {
  std::string name;            // e.g. "h.0.attn.qkv.weight" (checkpoint.cpp maps to HF names)
  std::vector<int64_t> shape;  // [rows, cols] for matrices ([out, in] for linear layers)
  int64_t offset = 0, size = 0;
  bool decay = false;          // weight decay applies (matrices and embeddings)
  float init_std = 0;          // N(0, std); 0 = zeros, -1 = ones
};

struct LayerParams {  // offsets of one block's tensors; -1 when the architecture has none
  int64_t ln1_w = -1, ln1_b = -1, qkv_w = -1, qkv_b = -1, q_norm = -1, k_norm = -1, proj_w = -1, proj_b = -1;
  int64_t ln2_w = -1, ln2_b = -1, fc_w = -1, fc_b = -1, fc2_w = -1, fc2_b = -1;
};

struct ParamLayout {
  std::vector<ParamInfo> tensors;
  std::vector<LayerParams> layers;
  int64_t wte = -1, wpe = -1, lnf_w = -1, lnf_b = -1, head = -1;  // head = -1 when tied
  int64_t total = 0;
  const ParamInfo& find(const std::string& name) const;
};
ParamLayout make_layout(const ModelShape& s);

struct LoraLayout;
struct LoraPiece;

template <typename T>
class Model {
 public:
  // Activations are sized for batches of up to max_batch sequences of up to shape.context tokens.
  // With `lora`: the base is frozen (no gradients, no optimiser state) and the adapter's side
  // paths are what trains; the layout must outlive the model.
  Model(const ModelShape& shape, int64_t max_batch, const LoraLayout* lora = nullptr);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // Bytes a model of this shape needs while training (parameters, gradients, AdamW's two moments,
  // activations), for refusing up front what cannot fit.
  static uint64_t training_bytes(const ModelShape& shape, int64_t max_batch, const LoraLayout* lora = nullptr);

  const ModelShape& shape() const { return shape_; }
  const ParamLayout& layout() const { return layout_; }
  int64_t num_params() const { return layout_.total; }
  T* params() { return params_.data(); }
  const T* params() const { return params_.data(); }
  T* grads() { return grads_.data(); }  // empty when the base is frozen

  // What the optimiser updates: the adapter under LoRA, else every parameter.
  const LoraLayout* lora() const { return lora_; }
  const ParamLayout& trainable_layout() const;
  int64_t num_trainable() const { return trainable_layout().total; }
  T* trainable() { return lora_ ? adapter_.data() : params_.data(); }
  const T* trainable() const { return lora_ ? adapter_.data() : params_.data(); }
  T* trainable_grads() { return lora_ ? adapter_grads_.data() : grads_.data(); }

  // The nanoGPT initialisation from `seed`: N(0, 0.02), residual output projections
  // N(0, 0.02/sqrt(2 * layers)), biases 0, norm weights 1.
  void init(uint64_t seed);

  // Runs B sequences of Tn tokens. With targets: returns the mean cross-entropy and keeps what
  // backward() needs. Without: returns 0 and logits() holds [B*Tn, vocab]. `scored_total` > 0: the
  // B rows are a share of a batch with that many scored targets, and the loss and its gradients are
  // divided by it (cross_entropy), so the shares' gradients sum to the whole batch's.
  double forward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t Tn, int64_t scored_total = 0);
  const T* logits() const;
  // Gradients of the last forward's mean loss into trainable_grads() (every entry written).
  void backward();

 private:
  struct Acts;
  void lora_forward(int64_t layer, int site, T* y, const T* x);
  void lora_backward(int64_t layer, int site, T* dx, const T* dy, const T* x);
  T* kept_product(const LoraPiece& p);
  ModelShape shape_;
  ParamLayout layout_;
  int64_t max_batch_;
  std::vector<T> params_, grads_;
  const LoraLayout* lora_ = nullptr;
  std::vector<T> adapter_, adapter_grads_;
  std::vector<T> lora_t_, lora_dt_;  // per piece [max_batch * context, r] (t = s x Aᵀ); the backward's dt
  std::unique_ptr<Acts> acts_;
  std::unique_ptr<RopeTables<T>> rope_;
  std::vector<int32_t> tokens_;
  int64_t B_ = 0, T_ = 0;
};

}  // namespace kvad::train
