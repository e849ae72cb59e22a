// Backend: the operations an architecture file calls, over Tensors the backend owns. The CPU
// backend (make_cpu_backend) is kvad's kernels; a second backend implements the same calls and no
// architecture file changes. An architecture file never names an ISA or a device, and never
// touches a tensor's elements itself.
//
// Scratch tensors come from an arena reset by begin_forward(): sized by the largest batch seen, so
// a decode step allocates nothing. begin_forward() also names the batch the forward runs, so that
// linear can add each sequence's LoRA side path to its own rows (backend/lora.h).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <utility>
#include <vector>

#include "backend/batch.h"
#include "backend/memory.h"
#include "backend/tensor.h"
#include "backend/weight.h"
#include "core/json.h"
#include "kernels/attention.h"
#include "kernels/gated_delta.h"
#include "kernels/latent_attention.h"
#include "kernels/moe.h"

namespace kvad {

// A mixture-of-experts layer (models/moe.h declares it from the config).
struct Expert {
  Weight gate, up, down;  // SwiGLU: down(silu(gate x) * up x)
};
struct MoeWeights {
  // [experts, hidden], kept f32 whatever the weights' format (as llama.cpp's converter does): the
  // choice of experts is a comparison, and rounding the router moves near-ties.
  std::vector<float> router;
  std::vector<float> score_bias;  // DeepSeek-V3's e_score_correction_bias (the choice only); may be empty
  std::vector<Expert> experts;
};

// Which columns rope rotates together: (i, i + d/2) (rotate-half: GPT-NeoX, Llama, Qwen) or
// (2i, 2i + 1) (adjacent pairs: GPT-J, DeepSeek's MLA).
enum class RopePairs { Half, Adjacent };

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // --- memory
  // Bytes of weight matrices this backend keeps copies of (a GPU's memory); 0 for one that reads
  // them where they are (the CPU). A matrix used twice (a tied embedding) counts once.
  virtual size_t held_weight_bytes() const { return 0; }
  // Bytes of memory of its own this backend may fill (a GPU's device-local heap) and has filled
  // (weights, cache, scratch); 0 and 0 for one that uses the host's memory (the CPU).
  virtual size_t memory_capacity() const { return 0; }
  virtual size_t memory_in_use() const { return 0; }
  // Copies every matrix to the backend's memory now (not on first use), through `cache_file`
  // when the backend keeps them in a layout of its own: read from it when its stamp matches
  // `stamp`, else converted and written there. Returns what it did, for the user ("" = nothing).
  // `progress(done, total)`, when set, hears of each matrix copied.
  virtual std::string prepare_weights(const std::vector<NamedWeight>& matrices, const std::string& cache_file,
                                      const Json& stamp, const WeightsProgress& progress) {
    return "";
  }
  virtual void begin_forward(const Batch& batch) = 0;
  virtual Tensor tensor(int64_t rows, int64_t cols) = 0;  // uninitialised scratch, valid until the next begin_forward
  // n_states: slots of recurrent state (working states and snapshots), for a spec with recurrent layers.
  virtual std::unique_ptr<Memory> make_memory(const MemorySpec& spec, int64_t n_blocks, int64_t block_size,
                                              int64_t n_states = 0) = 0;

  // --- the operations
  // out[r] = table.row(batch.rows()[r].token); refuses ids outside the table.
  virtual void embed(const Weight& table, const Batch& batch, Tensor out) = 0;
  // x[r] += table[batch.rows()[r].pos] (GPT-2's learned positions; table is [positions, x.cols]).
  virtual void add_position_rows(Tensor x, const std::vector<float>& table, const Batch& batch) = 0;
  // y = x W^T (x: [n, W.cols], y: [n, W.rows]); when x's rows are the batch's, plus
  // scale * (x A^T) B^T on the rows of each sequence whose adapters pair W with (A, B).
  virtual void linear(const Weight& w, Tensor x, Tensor y) = 0;
  // Several weights over one input (q/k/v, gate/up): the input is prepared once.
  virtual void linear_group(Tensor x, std::initializer_list<std::pair<const Weight*, Tensor>> outs) = 0;
  virtual void add_bias(Tensor y, const std::vector<float>& b) = 0;      // each row += b
  virtual void add(Tensor y, Tensor x) = 0;                               // y += x
  virtual void rmsnorm(Tensor x, const std::vector<float>& w, float eps, Tensor out) = 0;  // per row; out may be x
  virtual void layernorm(Tensor x, const std::vector<float>& w, const std::vector<float>& b, float eps, Tensor out) = 0;
  virtual void silu_mul(Tensor gate, Tensor up) = 0;                      // gate = silu(gate) * up
  // y *= sigmoid(gate), element-wise (gate: y's shape) or per row (gate: one column).
  virtual void sigmoid_gate(Tensor y, Tensor gate) = 0;
  virtual void gelu_tanh(Tensor x) = 0;
  // table[r] = cos(pos_r * inv_freq) | sin(pos_r * inv_freq) for every row of the batch ([rows, 2 * inv_freq.size()]),
  // both times magnitude (YaRN's attention factor; 1 otherwise).
  virtual void rope_table(const Batch& batch, const std::vector<double>& inv_freq, Tensor table,
                          double magnitude = 1.0) = 0;
  // Rotates each of x's `heads` heads by its row's angles (rotate-half / GPT-NeoX convention).
  virtual void rope(Tensor x, int64_t heads, Tensor table) = 0;
  // Rotates columns first .. first + dims - 1 of each of x's `heads` heads (table: dims / 2
  // frequencies): DeepSeek's rope dimensions after the unrotated ones, Qwen3-Next's partial rotary
  // before them.
  virtual void rope_part(Tensor x, int64_t heads, int64_t first, int64_t dims, RopePairs pairs, Tensor table) = 0;
  // Stores k/v of the batch's rows in `layer`'s pages at their positions, then causal attention of
  // q over each row's own sequence.
  virtual void attention(const Memory& memory, int64_t layer, const Batch& batch, const kernels::AttentionShape& shape,
                         Tensor q, Tensor k, Tensor v, Tensor out) = 0;
  // out = sum over each row's routed experts of weight x expert(row) (routing as kernels/moe.h).
  // Only the chosen experts' weights are read; a batch's rows are grouped by expert, so each
  // chosen expert's weights stream once per call.
  virtual void moe(const MoeWeights& layer, const kernels::Routing& routing, Tensor x, Tensor out) = 0;
  // Multi-head latent attention, absorbed (kernels/latent_attention.h): stores each row's latent
  // ([rows, kv_rank + rope_dim]: the normed c_kv, then the rotated k_pe) in `layer`'s K-only pages
  // at its position, then causal attention of q ([rows, heads * (nope + rope)], q_pe rotated)
  // through kv_b ([heads * (nope + v), kv_rank], f32) into out ([rows, heads * v]).
  virtual void latent_attention(const Memory& memory, int64_t layer, const Batch& batch,
                                const kernels::LatentShape& shape, const std::vector<float>& kv_b, Tensor q,
                                Tensor latent, Tensor out) = 0;
  // The gated DeltaNet mixer of a linear-attention layer (kernels/gated_delta.h): each span of
  // the batch continues from its sequence's state in `layer`'s slot (BatchSpan::state), advances
  // it, and leaves snapshots where the span says. qkvz [rows, shape.qkvz_width()] and ba
  // [rows, shape.ba_width()] as in_proj_qkvz / in_proj_ba compute them; out [rows, shape.out_width()].
  virtual void gated_delta_net(const Memory& memory, int64_t layer, const Batch& batch,
                               const kernels::DeltaNetShape& shape, const kernels::DeltaNetWeights& weights,
                               Tensor qkvz, Tensor ba, Tensor out) = 0;
  // out = the rows of x that want logits, in row order ([batch.n_logits(), x.cols]).
  virtual void logit_rows(Tensor x, const Batch& batch, Tensor out) = 0;
};

std::unique_ptr<Backend> make_cpu_backend();

}  // namespace kvad
