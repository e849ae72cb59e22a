// The two blocks a UNet level is made of (image/unet.h), as diffusers 0.25.1 builds them for SD 1.5
// and SDXL, on channels-last maps (image/nn.h):
//
//   ResnetBlock       diffusers' ResnetBlock2D, time_embedding_norm "default", output_scale_factor 1:
//                     GroupNorm+SiLU, conv 3x3, + Linear(SiLU(temb)) per image, GroupNorm+SiLU,
//                     conv 3x3, + the input (through a 1x1 conv_shortcut when the widths differ).
//   SpatialTransformer  diffusers' Transformer2DModel (continuous input): GroupNorm (eps 1e-6),
//                     proj_in (1x1 conv for SD 1.5, Linear for SDXL: the same product on a pixel
//                     row), BasicTransformerBlocks (LayerNorm -> self-attention, LayerNorm ->
//                     cross-attention on the text, LayerNorm -> GEGLU feed-forward; each added to
//                     its input), proj_out, + the input.
//
// Each holds its layers; `declare` lists the tensors with their diffusers names and shapes (the
// UNet's tensor table is the union of these lists), `forward` is the computation.
#pragma once
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "image/nn.h"

namespace kvad::image {

// One entry of a tensor table: a layer, the prefix its tensors are named by ("<name>.weight",
// "<name>.bias") and the shape it must have. The load walks the table and calls the layer's load.
struct LayerDecl {
  std::string name;
  std::variant<Conv2d*, Linear*, GroupNorm*, LayerNorm*> layer;
  int64_t out = 0, in = 0;  // Conv2d: cout, cin; Linear: out, in; norms: channels in `out`
  int64_t k = 1, stride = 1, pad = 0;  // Conv2d
  bool bias = true;                    // Linear
  int64_t groups = 0;                  // GroupNorm
  double eps = 0;                      // the norms
};
using TensorTable = std::vector<LayerDecl>;

struct ResnetBlock {
  int64_t cin = 0, cout = 0;
  GroupNorm norm1, norm2;
  Conv2d conv1, conv2, shortcut;  // shortcut: only when cin != cout
  Linear time_emb_proj;           // [cout, temb]

  void declare(TensorTable& t, const std::string& prefix, int64_t cin, int64_t cout, int64_t temb, int64_t groups,
               double eps);
  // `temb_act` is SiLU(time embedding), [x.n, temb]: the same for every block, computed once.
  Map forward(const Map& x, const std::vector<float>& temb_act) const;
};

struct TransformerBlock {
  LayerNorm norm1, norm2, norm3;
  Linear q1, k1, v1, out1;  // self-attention (to_q/k/v without bias, to_out.0 with)
  Linear q2, k2, v2, out2;  // cross-attention: k and v read the text context
  Linear ff_in, ff_out;     // GEGLU: ff.net.0.proj [2*4*dim, dim] (value half first), ff.net.2
};

struct SpatialTransformer {
  int64_t channels = 0, heads = 0;
  GroupNorm norm;
  Linear proj_in, proj_out;
  std::vector<TransformerBlock> blocks;

  void declare(TensorTable& t, const std::string& prefix, int64_t channels, int64_t heads, int64_t layers,
               int64_t context_dim, int64_t groups, bool linear_projection);
  // In place on x [n, h, w, channels]; `context` is [n, tokens, context_dim].
  void forward(Map& x, const float* context, int64_t tokens) const;
};

// Reads every layer the table lists (shapes checked by the layers' loads).
void load_table(const TensorTable& t, Checkpoint& ck, WeightFormat fmt);

// Channels-last concatenation [a | b] along the channels (the up path's cat([h, skip], dim=1)).
Map concat_channels(const Map& a, const Map& b);

}  // namespace kvad::image
