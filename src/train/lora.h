// LoRA for the trainer: a low-rank side path beside the frozen base's projections, its backward,
// where the adapter's tensors live, and the PEFT folder it is saved as (and read back from for
// --resume). The run-time side (docs/lora.md, models/lora.h) runs what this saves.
//
// The trainer's model keeps fused projections per layer (model.h): qkv ([q | k | v] rows), proj
// (attention output), fc (GPT-2 c_fc; Llama [gate | up] rows), fc2 (GPT-2 mlp.c_proj; Llama
// down_proj). A LoRA pair on one Hugging Face module adds to that module's columns of its site's
// output:
//   y[:, out0 : out0 + out] += s (x Aᵀ) Bᵀ,   A [r, in], B [out, r],   s = alpha / r  (alpha / sqrt(r): rsLoRA)
// A and B are [r, in] / [out, r] whatever the base stores (PEFT's orientation, GPT-2's Conv1D
// included: PEFT transposes only when merging into a Conv1D).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/json.h"
#include "train/model.h"

namespace kvad::train {

struct LoraConfig {
  int64_t rank = 16;
  double alpha = 32;
  bool rslora = false;
  // PEFT target_modules, matched as PEFT matches them: a target covers a module whose name is it
  // or ends with "." + it ("c_proj" covers GPT-2's attn.c_proj and mlp.c_proj, "attn.c_proj" only
  // the first). Llama: q_proj k_proj v_proj o_proj gate_proj up_proj down_proj; GPT-2: c_attn
  // c_proj c_fc. "all-linear" (alone) covers every projection (not the embedding or the head).
  std::vector<std::string> targets;
  double scale() const;  // alpha / rank, or alpha / sqrt(rank) with rsLoRA
};

// The fused projection a piece adds to (its weight: LayerParams::qkv_w, proj_w, fc_w, fc2_w).
enum class LoraSite : int { Qkv = 0, Proj = 1, Fc = 2, Fc2 = 3 };
inline constexpr int kLoraSites = 4;
const char* lora_site_name(LoraSite s);

// One adapted Hugging Face module.
struct LoraPiece {
  std::string module;  // "model.layers.3.self_attn.k_proj", "transformer.h.0.attn.c_attn"
  int64_t layer = 0;
  LoraSite site = LoraSite::Qkv;
  int64_t out0 = 0, out = 0;  // the site's output columns [out0, out0 + out) (rows of its weight)
  int64_t in = 0;             // the site's input width
  int64_t ldy = 0;            // the site's output width: the row stride of y and dy
  int64_t a = 0, b = 0;       // offsets of A [rank, in] and B [out, rank] in the adapter buffer
};

struct LoraLayout {
  LoraConfig config;  // as given (targets deduplicated)
  ModelShape shape;
  // Layer by layer, sites in the order above, out0 ascending (q, k, v; gate, up).
  std::vector<LoraPiece> pieces;
  // One tensor per A and per B ("<module>.lora_A.weight" / ".lora_B.weight", decay = true as for
  // every matrix, init_std unused: lora_init draws them), so AdamW can run over the adapter alone.
  // params.total is the adapter buffer's length: Σ rank * (in + out), with no padding.
  ParamLayout params;
  // The sorted module kinds that can be targeted on this architecture (for messages).
  std::vector<std::string> valid_targets;

  int64_t total() const { return params.total; }
  double scale() const { return config.scale(); }
  // The pieces of one site of one layer (none when it is not adapted): O(1), for every forward.
  std::span<const LoraPiece> at(int64_t layer, LoraSite site) const {
    const size_t i = (size_t)(layer * kLoraSites + (int)site);
    return std::span<const LoraPiece>(pieces).subspan((size_t)first[i], (size_t)(first[i + 1] - first[i]));
  }
  std::vector<int32_t> first;  // [layers * kLoraSites + 1]: the first piece of each (layer, site)
};

// Resolves the targets on the model's Hugging Face modules (checkpoint.h's hf_tensors(): the one
// list of names and row ranges). Throws naming an unknown target (with the valid ones), a rank
// below 1 or above min(in, out) of a target (naming it), alpha <= 0 or not finite, no targets.
LoraLayout make_lora_layout(const ModelShape& shape, const LoraConfig& cfg);

// As PEFT initialises: A ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform_ with a = sqrt(5)), B = 0,
// so a fresh adapter leaves the model unchanged. Deterministic from `seed` (core/rng.h).
template <typename T>
void lora_init(T* adapter, const LoraLayout& L, uint64_t seed);

// The side path of one piece, beside that site's linear_fwd / linear_bwd (layers.h conventions:
// row-major activations, [rows, width]). x is the site's input [rows, in] (row stride in); y and
// dy point at the piece's first column of the site's output (y_site + out0), row stride ldy.
//   forward   t  = s x Aᵀ            [rows, r]   =   (kept for the backward; scaled, see below)
//             y += t Bᵀ                          +=
// T = float runs the SIMD gemm (threads), T = double the reference (the gradient checks).
template <typename T>
void lora_fwd(T* y, int64_t ldy, T* t, const T* x, const T* A, const T* B, int64_t rows, int64_t in, int64_t out,
              int64_t r, T scale);
// With t as lora_fwd left it (t = s x Aᵀ, so dB needs no second scaling):
//   dB  = dyᵀ t    = s dyᵀ (x Aᵀ)     [out, r]    =
//   dt  = s dy B                      [rows, r]   =   (scratch)
//   dA  = dtᵀ x                       [r, in]     =
//   dx += dt A                        [rows, in]  +=  (after the base's linear_bwd wrote dx; may be null)
template <typename T>
void lora_bwd(T* dx, T* dA, T* dB, T* dt, const T* dy, int64_t ldy, const T* x, const T* t, const T* A, const T* B,
              int64_t rows, int64_t in, int64_t out, int64_t r, T scale);

// The adapter merged into the base: W[out0 + o, :] += s Σ_j B[o, j] A[j, :] for every piece, on
// the trainer's flat parameters (`base` = make_layout(L.shape)). What a merged export saves.
template <typename T>
void lora_merge(T* params, const ParamLayout& base, const LoraLayout& L, const T* adapter);

// ---- The PEFT folder.
struct AdapterSaveInfo {
  std::string base_model;          // adapter_config.json base_model_name_or_path
  Json kvad = Json::object();      // adapter_config.json "kvad": how it was trained (omitted when empty)
  // For resuming (optional): AdamW's moments over the adapter buffer -> optimizer.safetensors,
  // and trainer_state.json (null: not written).
  const float *adam_m = nullptr, *adam_v = nullptr;
  Json state;
};

// Writes `dir` whole and atomically (core/fs.h write_directory_atomically: a temporary sibling,
// fsynced, swapped in with one rename), replacing an existing folder:
//   adapter_config.json         peft_type LORA, task_type CAUSAL_LM, r, lora_alpha, use_rslora,
//                               target_modules (sorted; "all-linear" written as the module kinds
//                               it covers, as PEFT saves it), lora_dropout 0, bias "none",
//                               fan_in_fan_out (true for GPT-2's Conv1D), inference_mode true,
//                               base_model_name_or_path, "kvad": info.kvad
//   adapter_model.safetensors   base_model.model.<module>.lora_A.weight [r, in] and
//                               .lora_B.weight [out, r], f32
//   optimizer.safetensors       adamw.m.<tensor name> / adamw.v.<tensor name> (when both given)
//   trainer_state.json          info.state (when not null)
void save_peft_adapter(const std::string& dir, const LoraLayout& L, const float* adapter, const AdapterSaveInfo& info);

struct LoadedAdapter {
  std::vector<float> adapter;         // [expected.total()]
  std::vector<float> adam_m, adam_v;  // empty when the folder has no optimizer.safetensors
  Json config;                        // adapter_config.json
  Json state;                         // trainer_state.json; null when absent
};
// Reads a PEFT LoRA folder for `expected` (--resume, or continuing from another PEFT adapter):
// the config's r, lora_alpha, use_rslora and the modules its target_modules cover must equal
// the layout's, every tensor must be there with its shape (F32, BF16 or F16; finite), and no
// other; each mismatch is an error naming the file and the field or tensor.
LoadedAdapter load_peft_adapter(const std::string& dir, const LoraLayout& expected);

}  // namespace kvad::train
