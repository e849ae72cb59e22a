// The tensor table of an architecture: every tensor a config implies, declared once by the family
// file (models/llama.cpp, models/gpt2.cpp) with its Hugging Face name, its llama.cpp (GGUF) name,
// its shape as the checkpoint stores it, its role and where the loaded value goes. Everything else
// that used to be a hand-kept copy is derived from that one list (models/tensors.cpp):
//   loading (and so the unread-tensor guard), the tied-head check, parameter counts, weight bytes,
//   bytes read per decode step, the GGUF name map handed to io, and synth's random checkpoints.
// Optional tensors are simply not listed when the config says they are absent (qwen2's q/k/v
// biases, qwen3's q/k norms), so "what the config implies" and "what is read" cannot drift apart.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backend/weight.h"
#include "io/gguf.h"
#include "models/config.h"

namespace kvad {

class WeightSource;

enum class TensorRole {
  Matrix,  // [out, in], as every kernel multiplies
  Conv1D,  // stored [in, out] (GPT-2's Conv1D), transposed once at load into [out, in]
  Vector,  // used element-wise (norms, biases, a position table): kept as f32 values
};

// What synth fills a tensor with (models/synth.cpp).
// Router: N(0, (2 / sqrt(in))^2) whatever --std says, so router logits ~ N(0, 4): clear gaps at
// the top-k boundary, where a near-tie would let two correct engines pick different experts
// (the peer's synth.py draws routers the same way).
enum class TensorInit { Normal, One, Zero, Router };

struct TensorDecl {
  std::string hf;              // Hugging Face checkpoint name
  std::string gguf;            // llama.cpp's name for it ("" when GGUF has none)
  std::vector<int64_t> shape;  // as the HF checkpoint stores it (Conv1D: [in, out])
  TensorRole role = TensorRole::Matrix;
  TensorInit init = TensorInit::Normal;
  // An embedding table a decode step reads one row of (not when it is also the tied head).
  bool row_lookup = false;
  // Non-empty: this tensor IS `tied_to` (tie_word_embeddings). Nothing is loaded for it, it is
  // not counted, synth does not write it; a checkpoint that saves it anyway must hold the same bytes.
  std::string tied_to;
  // llama.cpp's converter permutes the rows of Q and K per head for the llama GGUF architecture;
  // the number of heads to undo it over (0: not permuted). Used only where the family's GGUF
  // description says its files are permuted.
  int64_t gguf_permuted_heads = 0;
  // A layer's projection: what a LoRA adapter may sit beside (not the embedding or the head).
  bool adaptable = false;
  // One expert's slice of a GGUF 3-D tensor ([experts, rows, cols], llama.cpp's `*_exps`): its
  // index there (-1: the GGUF tensor is this tensor whole).
  int64_t gguf_expert = -1;
  // The share of this tensor one decode step reads: a routed expert's is top_k / experts.
  double read_share = 1.0;
  // Where the loaded value goes (one of the two, by role); null in a list made only to be read.
  Weight* weight = nullptr;
  std::vector<float>* values = nullptr;

  int64_t numel() const;
};
using TensorList = std::vector<TensorDecl>;

// Declaration helpers, so a family's table reads as one line per tensor.
TensorDecl matrix_tensor(std::string hf, std::string gguf, int64_t rows, int64_t cols, Weight* to);
TensorDecl conv1d_tensor(std::string hf, std::string gguf, int64_t in, int64_t out, Weight* to);
TensorDecl vector_tensor(std::string hf, std::string gguf, std::vector<int64_t> shape, TensorInit init,
                         std::vector<float>* to);
TensorDecl tied_tensor(std::string hf, std::string gguf, std::string tied_to, std::vector<int64_t> shape);

// Reads every listed tensor from `src` into its destination, and checks a saved tied copy.
void load_tensors(const TensorList& list, WeightSource& src);
// Drops the destinations (for a list built against scratch storage, to be read only).
void forget_destinations(TensorList& list);

// A family's table for a config with no model behind it (for synth, GGUF names, counts): built
// against scratch weights (`Weights` has layers_, sized here) whose addresses are then dropped.
template <class Weights, class Table>
TensorList table_without_destinations(const ModelConfig& c, Table table) {
  Weights scratch;
  scratch.layers_.resize((size_t)c.n_layers);
  TensorList t = table(c, scratch);
  forget_destinations(t);
  return t;
}

// A projection an adapter may target, by the names adapter files use for it.
struct AdaptableMatrix {
  std::string module;  // Hugging Face module name ("model.layers.0.self_attn.q_proj"): PEFT's key
  std::string gguf;    // llama.cpp's tensor name ("blk.0.attn_q.weight"): a LoRA GGUF's key
  const Weight* weight = nullptr;
  int64_t gguf_permuted_heads = 0;  // as TensorDecl's: llama GGUF adapters permute B's rows too
};
std::vector<AdaptableMatrix> adaptable_matrices(const TensorList& list);

// Every matrix of a loaded list by its checkpoint name, each once (a tied copy is not listed).
std::vector<NamedWeight> named_matrices(const TensorList& list);

// Sizes derived from a loaded list (the Model keeps them; nothing is counted during a forward).
struct TensorStats {
  int64_t parameters = 0;     // elements of every tensor that is not a tied copy
  size_t weight_bytes = 0;    // bytes of the loaded weights, in their loaded formats
  size_t decode_read_bytes = 0;  // what one decode step reads: all but the unread rows of lookup tables
};
TensorStats loaded_stats(const TensorList& list);
// Parameters of a list (needs no destinations).
int64_t parameter_count(const TensorList& list);

// GGUF name -> how io presents it (io/gguf.h), for every listed tensor that has a GGUF name.
// `permuted_qk`: the file's architecture is one llama.cpp permutes Q/K rows for.
GgufNameMap gguf_name_map(const TensorList& list, bool permuted_qk);

}  // namespace kvad
