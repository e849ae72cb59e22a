// ResNet block and spatial transformer of the UNet (unet_blocks.h), following diffusers 0.25.1's
// resnet.py (ResnetBlock2D), transformer_2d.py (Transformer2DModel), attention.py
// (BasicTransformerBlock, FeedForward, GEGLU) and attention_processor.py (Attention): read for the
// facts, written out here on image/nn.h.
#include "image/unet_blocks.h"

#include <cstring>

#include "core/error.h"
#include "core/threads.h"
#include "kernels/ops.h"

namespace kvad::image {

void load_table(const TensorTable& t, Checkpoint& ck, WeightFormat fmt) {
  for (const LayerDecl& d : t) {
    if (auto* c = std::get_if<Conv2d*>(&d.layer)) **c = Conv2d::load(ck, d.name, d.out, d.in, d.k, d.stride, d.pad, fmt);
    else if (auto* l = std::get_if<Linear*>(&d.layer)) **l = Linear::load(ck, d.name, d.out, d.in, d.bias, fmt);
    else if (auto* g = std::get_if<GroupNorm*>(&d.layer)) **g = GroupNorm::load(ck, d.name, d.out, d.groups, d.eps);
    else if (auto* n = std::get_if<LayerNorm*>(&d.layer)) **n = LayerNorm::load(ck, d.name, d.out, d.eps);
  }
}

Map concat_channels(const Map& a, const Map& b) {
  if (a.n != b.n || a.h != b.h || a.w != b.w)
    fail("concat_channels: maps [{},{},{},{}] and [{},{},{},{}] differ in size", a.n, a.h, a.w, a.c, b.n, b.h, b.w, b.c);
  Map out(a.n, a.h, a.w, a.c + b.c);
  for (int64_t p = 0; p < a.pixels(); p++) {
    float* o = out.v.data() + p * out.c;
    std::memcpy(o, a.v.data() + p * a.c, (size_t)a.c * sizeof(float));
    std::memcpy(o + a.c, b.v.data() + p * b.c, (size_t)b.c * sizeof(float));
  }
  return out;
}

// ---- ResnetBlock2D ----

void ResnetBlock::declare(TensorTable& t, const std::string& p, int64_t in, int64_t out, int64_t temb, int64_t groups,
                          double eps) {
  cin = in, cout = out;
  t.push_back({p + "norm1", &norm1, in, 0, 1, 1, 0, true, groups, eps});
  t.push_back({p + "conv1", &conv1, out, in, 3, 1, 1});
  t.push_back({p + "time_emb_proj", &time_emb_proj, out, temb});
  t.push_back({p + "norm2", &norm2, out, 0, 1, 1, 0, true, groups, eps});
  t.push_back({p + "conv2", &conv2, out, out, 3, 1, 1});
  if (in != out) t.push_back({p + "conv_shortcut", &shortcut, out, in, 1, 1, 0});
}

Map ResnetBlock::forward(const Map& x, const std::vector<float>& temb_act) const {
  Map h = x;
  norm1.apply(h, /*then_silu=*/true);
  h = conv1.apply(h);
  // The time embedding, projected to this block's width, added to every pixel of its image.
  std::vector<float> t((size_t)(x.n * cout));
  time_emb_proj.apply(temb_act.data(), x.n, t.data());
  const int64_t per_image = h.h * h.w;
  for (int64_t b = 0; b < h.n; b++) {
    const float* tb = t.data() + b * cout;
    for (int64_t p = 0; p < per_image; p++) {
      float* row = h.v.data() + (b * per_image + p) * cout;
      for (int64_t c = 0; c < cout; c++) row[c] += tb[c];
    }
  }
  norm2.apply(h, /*then_silu=*/true);
  h = conv2.apply(h);
  if (cin != cout) {
    Map s = shortcut.apply(x);
    for (size_t i = 0; i < h.v.size(); i++) h.v[i] += s.v[i];
  } else {
    for (size_t i = 0; i < h.v.size(); i++) h.v[i] += x.v[i];
  }
  return h;
}

// ---- Transformer2DModel ----

void SpatialTransformer::declare(TensorTable& t, const std::string& p, int64_t c, int64_t h, int64_t layers,
                                 int64_t context_dim, int64_t groups, bool linear_projection) {
  channels = c, heads = h;
  (void)linear_projection;  // a 1x1 conv's [c, c, 1, 1] weight loads as the same Linear (nn.h)
  t.push_back({p + "norm", &norm, c, 0, 1, 1, 0, true, groups, 1e-6});
  t.push_back({p + "proj_in", &proj_in, c, c});
  blocks.resize((size_t)layers);
  for (int64_t i = 0; i < layers; i++) {
    TransformerBlock& B = blocks[(size_t)i];
    std::string q = p + "transformer_blocks." + std::to_string(i) + ".";
    const int64_t ff = 4 * c;  // FeedForward mult 4; GEGLU's projection gives value and gate
    t.push_back({q + "norm1", &B.norm1, c, 0, 1, 1, 0, true, 0, 1e-5});
    t.push_back({q + "attn1.to_q", &B.q1, c, c, 1, 1, 0, false});
    t.push_back({q + "attn1.to_k", &B.k1, c, c, 1, 1, 0, false});
    t.push_back({q + "attn1.to_v", &B.v1, c, c, 1, 1, 0, false});
    t.push_back({q + "attn1.to_out.0", &B.out1, c, c});
    t.push_back({q + "norm2", &B.norm2, c, 0, 1, 1, 0, true, 0, 1e-5});
    t.push_back({q + "attn2.to_q", &B.q2, c, c, 1, 1, 0, false});
    t.push_back({q + "attn2.to_k", &B.k2, c, context_dim, 1, 1, 0, false});
    t.push_back({q + "attn2.to_v", &B.v2, c, context_dim, 1, 1, 0, false});
    t.push_back({q + "attn2.to_out.0", &B.out2, c, c});
    t.push_back({q + "norm3", &B.norm3, c, 0, 1, 1, 0, true, 0, 1e-5});
    t.push_back({q + "ff.net.0.proj", &B.ff_in, 2 * ff, c});
    t.push_back({q + "ff.net.2", &B.ff_out, c, ff});
  }
  t.push_back({p + "proj_out", &proj_out, c, c});
}

namespace {

void add_into(std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); i++) a[i] += b[i];
}

// One BasicTransformerBlock on the rows a [n * T, C] (T pixels per image), in place.
void block_forward(const TransformerBlock& B, std::vector<float>& a, int64_t n, int64_t T, int64_t C, int64_t heads,
                   const float* context, int64_t tokens) {
  const int64_t N = n * T, D = C / heads;
  std::vector<float> x((size_t)(N * C)), q(x.size()), att(x.size()), o(x.size());
  // Self-attention over the image's pixels.
  {
    std::vector<float> k(x.size()), v(x.size());
    x = a;
    B.norm1.apply(x.data(), N);
    Linear::apply_group(x.data(), N, {{&B.q1, q.data()}, {&B.k1, k.data()}, {&B.v1, v.data()}});
    for (int64_t b = 0; b < n; b++) {
      const int64_t r = b * T * C;
      attention(q.data() + r, C, k.data() + r, v.data() + r, C, T, T, heads, D, att.data() + r, B.q1.w.packed.bf16);
    }
    B.out1.apply(att.data(), N, o.data());
    add_into(a, o);
  }
  // Cross-attention: queries from the pixels, keys and values from the text.
  {
    std::vector<float> k((size_t)(n * tokens * C)), v(k.size());
    x = a;
    B.norm2.apply(x.data(), N);
    B.q2.apply(x.data(), N, q.data());
    Linear::apply_group(context, n * tokens, {{&B.k2, k.data()}, {&B.v2, v.data()}});
    for (int64_t b = 0; b < n; b++)
      attention(q.data() + b * T * C, C, k.data() + b * tokens * C, v.data() + b * tokens * C, C, T, tokens, heads, D,
                att.data() + b * T * C, B.q2.w.packed.bf16);
    B.out2.apply(att.data(), N, o.data());
    add_into(a, o);
  }
  // GEGLU feed-forward: proj(x).chunk(2) = (value, gate) -> value * gelu(gate) -> ff.net.2.
  {
    x = a;
    B.norm3.apply(x.data(), N);
    const int64_t F = B.ff_out.in();
    // In runs of 1,024 rows: the products stay large, and the two buffers (10 + 5 MB at SD 1.5's
    // first level instead of 84 + 42) are reused from the heap rather than mapped and faulted in
    // afresh by every block.
    const int64_t run = std::min<int64_t>(N, 1024);
    std::vector<float> g((size_t)(run * 2 * F)), h((size_t)(run * F));
    for (int64_t s0 = 0; s0 < N; s0 += run) {
      const int64_t rows = std::min(run, N - s0);
      B.ff_in.apply(x.data() + s0 * C, rows, g.data());
      pool().parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; r++) {
          const float* row = g.data() + r * 2 * F;
          kernels::gelu_erf_mul(row, row + F, h.data() + r * F, F);
        }
      });
      B.ff_out.apply(h.data(), rows, o.data() + s0 * C);
    }
    add_into(a, o);
  }
}

}  // namespace

void SpatialTransformer::forward(Map& x, const float* context, int64_t tokens) const {
  const int64_t n = x.n, T = x.h * x.w, C = channels, N = n * T;
  std::vector<float> a((size_t)(N * C));
  {
    Map h = x;
    norm.apply(h, /*then_silu=*/false);
    proj_in.apply(h.v.data(), N, a.data());  // the 1x1 conv or Linear: the same product on pixel rows
  }
  for (const TransformerBlock& B : blocks) block_forward(B, a, n, T, C, heads, context, tokens);
  std::vector<float> o((size_t)(N * C));
  proj_out.apply(a.data(), N, o.data());
  for (size_t i = 0; i < o.size(); i++) x.v[i] += o[i];
}

}  // namespace kvad::image
