// CLIP's text encoder (transformers' CLIPTextModel / CLIPTextModelWithProjection) as Stable
// Diffusion runs it: token + learned position embeddings, pre-LayerNorm transformer layers with
// causal self-attention (no padding mask: pad tokens are ordinary tokens under the causal mask),
// quick_gelu (CLIP ViT-L, SD 1.5) or gelu (OpenCLIP bigG, SDXL's second encoder) MLPs, a final
// LayerNorm. The sizes come from the part's config.json, so tiny test encoders and fine-tunes load
// the same way. Weights as stored (f32 / bf16 in place) or converted at load (bf16, q8).
//
// What a pipeline takes from it (image/prompt.h puts them together):
//   last_hidden_state  the last layer after final_layer_norm      SD 1.5's conditioning
//   penultimate        hidden_states[-2]: the input of the last layer, no final norm   SDXL's
//   pooled             last_hidden_state at the first EOS (argmax of the ids, as transformers)
//   text_embeds        pooled x text_projection^T (WithProjection only)    SDXL's pooled vector
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/weight.h"
#include "core/json.h"
#include "io/checkpoint.h"

namespace kvad::image {

struct ClipTextConfig {
  enum class Act { QuickGelu, Gelu };
  std::string source;  // config.json's path, for messages
  int64_t hidden = 0, layers = 0, heads = 0, intermediate = 0, positions = 0, vocab = 0, projection = 0;
  Act act = Act::QuickGelu;
  double eps = 1e-5;
  bool with_projection = false;  // CLIPTextModelWithProjection: has text_projection
  int64_t head_dim() const { return hidden / heads; }
};

// config.json of a text_encoder folder; `what` names it in errors.
ClipTextConfig parse_clip_text_config(const Json& j, const std::string& what);

struct ClipTextOutput {
  int64_t tokens = 0, hidden = 0;
  std::vector<float> last_hidden_state;  // [tokens, hidden]
  std::vector<float> penultimate;        // [tokens, hidden]
  std::vector<float> pooled;             // [hidden]
  std::vector<float> text_embeds;        // [projection]; empty without text_projection
};

class ClipTextEncoder {
 public:
  // A text_encoder folder: config.json and its weights (any of diffusers' file names).
  static ClipTextEncoder load(const std::string& dir, WeightFormat fmt = WeightFormat::AsStored);
  // From a parsed config and an open checkpoint; every tensor the table lists is read with its
  // shape checked, and a tensor the checkpoint holds that nothing reads is an error. f32 and bf16
  // matrices are used in place from the file's mapping (fmt AsStored): the encoder keeps `ck` open.
  // Other formats convert the matrices at load (q8: a quarter of f32's memory for SDXL's 0.8 B).
  ClipTextEncoder(const ClipTextConfig& c, std::shared_ptr<Checkpoint> ck, WeightFormat fmt = WeightFormat::AsStored);

  const ClipTextConfig& config() const { return c_; }
  // `ids`: 1 .. positions tokens, each in [0, vocab).
  ClipTextOutput encode(const std::vector<int32_t>& ids) const;

 private:
  struct Layer {
    std::vector<float> ln1_w, ln1_b, ln2_w, ln2_b, q_b, k_b, v_b, o_b, fc1_b, fc2_b;
    Weight q, k, v, o, fc1, fc2;
  };
  // One tensor as the diffusers/transformers checkpoint names it, and where it goes.
  struct Decl {
    std::string name;
    std::vector<int64_t> shape;
    Weight* weight = nullptr;
    std::vector<float>* values = nullptr;
  };
  std::vector<Decl> tensor_table();
  void layer_forward(const Layer& L, std::vector<float>& h, int64_t T) const;

  ClipTextConfig c_;
  std::shared_ptr<Checkpoint> file_;  // the mapping the weights point into (a single file: shared by its parts)
  Weight token_embedding_, projection_;
  std::vector<float> position_embedding_, final_w_, final_b_;
  std::vector<Layer> layers_;
};

}  // namespace kvad::image
