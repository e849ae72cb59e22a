// AutoencoderKL (vae.h): diffusers 0.25.1 autoencoder_kl.py + vae.py (Encoder, Decoder) with the
// blocks they use (ResnetBlock2D without a time embedding, UNetMidBlock2D with one single-head
// Attention, DownEncoderBlock2D, UpDecoderBlock2D), written out on image/nn.h's channels-last
// layers. Every GroupNorm here has eps 1e-6 (diffusers passes 1e-6 to every VAE block).
#include "image/vae.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/fs.h"
#include "image/pipeline_config.h"

namespace kvad::image {

VaeConfig parse_vae_config(const Json& j, const std::string& what) {
  if (!j.is_object()) fail("{}: must be a JSON object", what);
  VaeConfig c;
  c.source = what;
  std::string cls = json_str_or(j, "_class_name", "AutoencoderKL", what);
  if (cls != "AutoencoderKL") fail("{}: '_class_name' = '{}' is not a VAE kvad runs (AutoencoderKL)", what, cls);
  auto size = [&](const char* key, int64_t dflt, int64_t lo, int64_t hi) {
    int64_t v = json_int_or(j, key, dflt, what);
    if (v < lo || v > hi) fail("{}: '{}' = {} is outside [{}, {}]", what, key, v, lo, hi);
    return v;
  };
  c.in_channels = size("in_channels", 3, 1, 64);
  c.out_channels = size("out_channels", 3, 1, 64);
  c.latent_channels = size("latent_channels", 4, 1, 256);
  c.layers_per_block = size("layers_per_block", 2, 1, 16);
  c.norm_groups = size("norm_num_groups", 32, 1, 1024);
  if (!j.contains("block_out_channels") || !j["block_out_channels"].is_array())
    fail("{}: 'block_out_channels' must be a list of channel counts", what);
  const Json& boc = j["block_out_channels"];
  if (boc.empty() || boc.size() > 8) fail("{}: 'block_out_channels' has {} levels (1 to 8)", what, boc.size());
  for (const Json& v : boc) {
    if (!v.is_number_integer()) fail("{}: 'block_out_channels' holds {}, not a channel count", what, json_snippet(v));
    int64_t ch = v.get<int64_t>();
    if (ch < 1 || ch > 8192) fail("{}: 'block_out_channels' entry {} is outside [1, 8192]", what, ch);
    if (ch % c.norm_groups)
      fail("{}: 'block_out_channels' entry {} is not a multiple of 'norm_num_groups' {}", what, ch, c.norm_groups);
    c.block_out_channels.push_back(ch);
  }
  auto block_types = [&](const char* key, const char* want) {
    if (!j.contains(key)) return;
    const Json& t = j[key];
    if (!t.is_array() || t.size() != boc.size())
      fail("{}: '{}' must list one block type per level ({} levels)", what, key, boc.size());
    for (const Json& v : t)
      if (!v.is_string() || v.get<std::string>() != want)
        fail("{}: '{}' holds {}: kvad's VAE has only {}", what, key, json_snippet(v), want);
  };
  block_types("down_block_types", "DownEncoderBlock2D");
  block_types("up_block_types", "UpDecoderBlock2D");
  std::string act = json_str_or(j, "act_fn", "silu", what);
  if (act != "silu") fail("{}: 'act_fn' = '{}' is not supported (silu)", what, act);
  c.scaling_factor = json_num_or(j, "scaling_factor", 0.18215, what);
  if (!(c.scaling_factor > 0 && c.scaling_factor < 1e6))
    fail("{}: 'scaling_factor' = {} must be a positive number", what, c.scaling_factor);
  c.force_upcast = json_bool_or(j, "force_upcast", false, what);
  // Keys of later VAEs (SD3 / FLUX shift, no quant convs, no mid attention) that change the math:
  // refused rather than ignored.
  if (j.contains("shift_factor") && !j["shift_factor"].is_null())
    fail("{}: 'shift_factor' = {} is not supported (SD 1.5 / SDXL VAEs have none)", what, json_snippet(j["shift_factor"]));
  for (const char* key : {"latents_mean", "latents_std"})
    if (j.contains(key) && !j[key].is_null()) fail("{}: '{}' is not supported (SD 1.5 / SDXL VAEs have none)", what, key);
  for (const char* key : {"use_quant_conv", "use_post_quant_conv", "mid_block_add_attention"})
    if (!json_bool_or(j, key, true, what)) fail("{}: '{}' = false is not supported", what, key);
  return c;
}

namespace {

constexpr double kEps = 1e-6;

void add_into(Map& x, const Map& y) {
  for (size_t i = 0; i < x.v.size(); i++) x.v[i] += y.v[i];
}

// ResnetBlock2D without a time embedding: norm1-SiLU-conv1-norm2-SiLU-conv2, plus the input
// (through a 1x1 conv_shortcut when the channel count changes).
struct Resnet {
  GroupNorm n1, n2;
  Conv2d c1, c2, shortcut;
  bool has_shortcut = false;

  static Resnet load(Checkpoint& ck, const std::string& p, int64_t cin, int64_t cout, int64_t groups, WeightFormat fmt) {
    Resnet r;
    r.n1 = GroupNorm::load(ck, p + "norm1", cin, groups, kEps);
    r.c1 = Conv2d::load(ck, p + "conv1", cout, cin, 3, 1, 1, fmt);
    r.n2 = GroupNorm::load(ck, p + "norm2", cout, groups, kEps);
    r.c2 = Conv2d::load(ck, p + "conv2", cout, cout, 3, 1, 1, fmt);
    r.has_shortcut = cin != cout;
    if (r.has_shortcut) r.shortcut = Conv2d::load(ck, p + "conv_shortcut", cout, cin, 1, 1, 0, fmt);
    return r;
  }
  Map apply(const Map& x) const {
    Map h = x;
    n1.apply(h, true);
    h = c1.apply(h);
    n2.apply(h, true);
    h = c2.apply(h);
    if (has_shortcut) add_into(h, shortcut.apply(x));
    else add_into(h, x);
    return h;
  }
};

// The mid block's Attention: GroupNorm, one head over the h*w pixels of each image (head size =
// channels, scale 1/sqrt(channels)), to_out, plus the input.
struct MidAttention {
  GroupNorm norm;
  Linear q, k, v, o;

  static MidAttention load(Checkpoint& ck, const std::string& p, int64_t c, int64_t groups, WeightFormat fmt) {
    MidAttention a;
    a.norm = GroupNorm::load(ck, p + "group_norm", c, groups, kEps);
    // diffusers < 0.14 saved these as query / key / value / proj_attn; some hub VAEs still are.
    bool old = ck.has(p + "query.weight");
    a.q = Linear::load(ck, p + (old ? "query" : "to_q"), c, c, true, fmt);
    a.k = Linear::load(ck, p + (old ? "key" : "to_k"), c, c, true, fmt);
    a.v = Linear::load(ck, p + (old ? "value" : "to_v"), c, c, true, fmt);
    a.o = Linear::load(ck, p + (old ? "proj_attn" : "to_out.0"), c, c, true, fmt);
    return a;
  }
  Map apply(const Map& x) const {
    Map h = x;
    norm.apply(h, false);
    const int64_t C = x.c, T = x.h * x.w;
    std::vector<float> q((size_t)(T * C)), k(q.size()), v(q.size()), a(q.size());
    Map out(x.n, x.h, x.w, C);
    for (int64_t b = 0; b < x.n; b++) {
      const float* hb = h.at(b, 0, 0);
      this->q.apply(hb, T, q.data());
      this->k.apply(hb, T, k.data());
      this->v.apply(hb, T, v.data());
      attention(q.data(), C, k.data(), v.data(), C, T, T, 1, C, a.data(), this->q.w.packed.bf16);
      o.apply(a.data(), T, out.at(b, 0, 0));
    }
    add_into(out, x);
    return out;
  }
};

struct MidBlock {
  Resnet r0, r1;
  MidAttention attn;
  static MidBlock load(Checkpoint& ck, const std::string& p, int64_t c, int64_t groups, WeightFormat fmt) {
    MidBlock m;
    m.r0 = Resnet::load(ck, p + "resnets.0.", c, c, groups, fmt);
    m.attn = MidAttention::load(ck, p + "attentions.0.", c, groups, fmt);
    m.r1 = Resnet::load(ck, p + "resnets.1.", c, c, groups, fmt);
    return m;
  }
  Map apply(const Map& x) const { return r1.apply(attn.apply(r0.apply(x))); }
};

// Downsample2D of the encoder: pad right and bottom by one zero, then a stride-2 3x3 conv without
// padding (diffusers' F.pad(x, (0, 1, 0, 1))).
Map pad_right_bottom(const Map& x) {
  Map p(x.n, x.h + 1, x.w + 1, x.c);
  for (int64_t b = 0; b < x.n; b++)
    for (int64_t y = 0; y < x.h; y++) std::copy(x.at(b, y, 0), x.at(b, y, 0) + x.w * x.c, p.at(b, y, 0));
  return p;
}

}  // namespace

struct Vae::Impl {
  struct Level {
    std::vector<Resnet> resnets;
    bool resample = false;
    Conv2d conv;  // the down or up sampler's conv
  };
  // decoder
  Conv2d post_quant, dec_in, dec_out;
  MidBlock dec_mid;
  std::vector<Level> up;
  GroupNorm dec_norm;
  // encoder
  Conv2d quant, enc_in, enc_out;
  MidBlock enc_mid;
  std::vector<Level> down;
  GroupNorm enc_norm;
};

Vae::Vae(const VaeConfig& c, std::shared_ptr<Checkpoint> ck, WeightFormat fmt)
    : c_(c), impl_(std::make_unique<Impl>()) {
  Checkpoint& f = *ck;
  Impl& m = *impl_;
  const auto& ch = c_.block_out_channels;
  if (ch.empty()) fail("{}: 'block_out_channels' is empty", c_.source);
  const int64_t L = c_.latent_channels, G = c_.norm_groups, levels = (int64_t)ch.size(), top = ch.back();
  const int64_t per = c_.layers_per_block;

  // Encoder: conv_in, down blocks (layers_per_block resnets, a downsampler but on the last), mid,
  // norm + SiLU, conv_out to 2 * latent (mean and logvar), then quant_conv.
  m.enc_in = Conv2d::load(f, "encoder.conv_in", ch[0], c_.in_channels, 3, 1, 1, fmt);
  int64_t cin = ch[0];
  for (int64_t i = 0; i < levels; i++) {
    Impl::Level lv;
    std::string p = "encoder.down_blocks." + std::to_string(i) + ".";
    for (int64_t r = 0; r < per; r++)
      lv.resnets.push_back(Resnet::load(f, p + "resnets." + std::to_string(r) + ".", r == 0 ? cin : ch[(size_t)i],
                                        ch[(size_t)i], G, fmt));
    cin = ch[(size_t)i];
    lv.resample = i + 1 < levels;
    if (lv.resample) lv.conv = Conv2d::load(f, p + "downsamplers.0.conv", cin, cin, 3, 2, 0, fmt);
    m.down.push_back(std::move(lv));
  }
  m.enc_mid = MidBlock::load(f, "encoder.mid_block.", top, G, fmt);
  m.enc_norm = GroupNorm::load(f, "encoder.conv_norm_out", top, G, kEps);
  m.enc_out = Conv2d::load(f, "encoder.conv_out", 2 * L, top, 3, 1, 1, fmt);
  m.quant = Conv2d::load(f, "quant_conv", 2 * L, 2 * L, 1, 1, 0, fmt);

  // Decoder: post_quant_conv, conv_in to the widest level, mid, up blocks over the levels in
  // reverse (layers_per_block + 1 resnets, nearest x2 + conv but on the last), norm + SiLU, conv_out.
  m.post_quant = Conv2d::load(f, "post_quant_conv", L, L, 1, 1, 0, fmt);
  m.dec_in = Conv2d::load(f, "decoder.conv_in", top, L, 3, 1, 1, fmt);
  m.dec_mid = MidBlock::load(f, "decoder.mid_block.", top, G, fmt);
  cin = top;
  for (int64_t i = 0; i < levels; i++) {
    Impl::Level lv;
    const int64_t cout = ch[(size_t)(levels - 1 - i)];
    std::string p = "decoder.up_blocks." + std::to_string(i) + ".";
    for (int64_t r = 0; r <= per; r++)
      lv.resnets.push_back(Resnet::load(f, p + "resnets." + std::to_string(r) + ".", r == 0 ? cin : cout, cout, G, fmt));
    cin = cout;
    lv.resample = i + 1 < levels;
    if (lv.resample) lv.conv = Conv2d::load(f, p + "upsamplers.0.conv", cout, cout, 3, 1, 1, fmt);
    m.up.push_back(std::move(lv));
  }
  m.dec_norm = GroupNorm::load(f, "decoder.conv_norm_out", ch[0], G, kEps);
  m.dec_out = Conv2d::load(f, "decoder.conv_out", c_.out_channels, ch[0], 3, 1, 1, fmt);
}

Vae::~Vae() = default;

std::unique_ptr<Vae> Vae::load(const std::string& dir, WeightFormat fmt) {
  std::string cfg = join_path(dir, "config.json");
  if (!file_exists(cfg)) fail("{}: missing (a vae folder holds config.json and its weights)", cfg);
  VaeConfig c = parse_vae_config(read_json_file(cfg), cfg);
  std::shared_ptr<Checkpoint> ck(open_part_weights(dir).release());
  auto vae = std::make_unique<Vae>(c, ck, fmt);
  ck->check_all_read({});
  return vae;
}

Map Vae::decode(const Map& latents, const StageRunner& run) const {
  const Impl& m = *impl_;
  if (latents.c != c_.latent_channels)
    fail("{}: VAE decode of latents with {} channels (the VAE's latent_channels is {})", c_.source, latents.c,
         c_.latent_channels);
  if (latents.n < 1 || latents.h < 1 || latents.w < 1) fail("{}: VAE decode of an empty latent", c_.source);
  auto probe = [&](const char* name, const Map& x) {
    if (probe_) probe_(probe_ctx_, name, x);
  };
  Map z = latents;
  const float sf = (float)c_.scaling_factor;
  for (float& f : z.v) f = f / sf;  // as the pipeline does: latents / vae.config.scaling_factor
  Map h;
  run_stage(run, [&] {
    z = m.post_quant.apply(z);
    probe("post_quant_conv", z);
    h = m.dec_in.apply(z);
    probe("decoder.conv_in", h);
  });
  run_stage(run, [&] { h = m.dec_mid.apply(h); });
  probe("decoder.mid_block", h);
  for (size_t i = 0; i < m.up.size(); i++) {
    const Impl::Level& lv = m.up[i];
    for (const Resnet& r : lv.resnets) run_stage(run, [&] { h = r.apply(h); });
    if (lv.resample) run_stage(run, [&] { h = lv.conv.apply(upsample_nearest2x(h)); });
    probe(("decoder.up_blocks." + std::to_string(i)).c_str(), h);
  }
  run_stage(run, [&] {
    m.dec_norm.apply(h, true);
    h = m.dec_out.apply(h);
  });
  probe("decoder.conv_out", h);
  return h;
}

void Vae::encode(const Map& image, Map& mean, Map& logvar) const {
  const Impl& m = *impl_;
  const int64_t mult = int64_t(1) << (c_.block_out_channels.size() - 1);
  if (image.c != c_.in_channels)
    fail("{}: VAE encode of an image with {} channels (the VAE's in_channels is {})", c_.source, image.c, c_.in_channels);
  if (image.n < 1 || image.h < mult || image.w < mult || image.h % mult || image.w % mult)
    fail("{}: VAE encode of a {}x{} image: width and height must be positive multiples of {}", c_.source, image.w,
         image.h, mult);
  auto probe = [&](const std::string& name, const Map& x) {
    if (probe_) probe_(probe_ctx_, name, x);
  };
  Map h = m.enc_in.apply(image);
  probe("encoder.conv_in", h);
  for (size_t i = 0; i < m.down.size(); i++) {
    const Impl::Level& lv = m.down[i];
    for (const Resnet& r : lv.resnets) h = r.apply(h);
    if (lv.resample) h = lv.conv.apply(pad_right_bottom(h));
    probe("encoder.down_blocks." + std::to_string(i), h);
  }
  h = m.enc_mid.apply(h);
  probe("encoder.mid_block", h);
  m.enc_norm.apply(h, true);
  h = m.enc_out.apply(h);
  probe("encoder.conv_out", h);
  h = m.quant.apply(h);
  probe("quant_conv", h);
  // moments.chunk(2, dim=1): the first latent_channels are the mean, the rest the logvar,
  // clamped to [-30, 20] (DiagonalGaussianDistribution).
  const int64_t L = c_.latent_channels;
  mean = Map(h.n, h.h, h.w, L);
  logvar = Map(h.n, h.h, h.w, L);
  for (int64_t p = 0; p < h.pixels(); p++) {
    const float* src = h.v.data() + p * 2 * L;
    for (int64_t i = 0; i < L; i++) {
      mean.v[(size_t)(p * L + i)] = src[i];
      logvar.v[(size_t)(p * L + i)] = std::clamp(src[L + i], -30.0f, 20.0f);
    }
  }
}

}  // namespace kvad::image
