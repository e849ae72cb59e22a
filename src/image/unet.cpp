// diffusers 0.25.1's UNet2DConditionModel (unet_2d_condition.py, unet_2d_blocks.py, embeddings.py)
// for SD 1.5 and SDXL, written out on image/nn.h and the blocks of image/unet_blocks.h. The config
// parser refuses, by key and value, everything those files can do that is not computed here.
#include "image/unet.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/fs.h"
#include "image/pipeline_config.h"
#include "image/unet_blocks.h"

namespace kvad::image {

// ---- config.json ----

namespace {

constexpr int64_t kMaxLevels = 6, kMaxChannels = 1 << 13, kMaxWidth = 1 << 16;

bool is_set(const Json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

// An int, or a list of one int per level (attention_head_dim, transformer_layers_per_block).
std::vector<int64_t> per_level(const Json& j, const char* key, int64_t dflt, int64_t levels, int64_t lo, int64_t hi,
                               const std::string& what) {
  std::vector<int64_t> out;
  if (!is_set(j, key)) {
    out.assign((size_t)levels, dflt);
  } else if (j[key].is_array()) {
    const Json& a = j[key];
    if ((int64_t)a.size() != levels)
      fail("{}: '{}' = {} has {} entries, one per level ({}) expected", what, key, json_snippet(a), a.size(), levels);
    for (size_t i = 0; i < a.size(); i++) {
      if (!a[i].is_number_integer() && !a[i].is_number_unsigned())
        fail("{}: '{}' = {}: entry {} must be an integer (nested lists are not supported)", what, key, json_snippet(a), i);
      out.push_back(a[i].get<int64_t>());
    }
  } else {
    out.assign((size_t)levels, json_int(j, key, what));
  }
  for (int64_t v : out)
    if (v < lo || v > hi) fail("{}: '{}' = {} is outside [{}, {}]", what, key, json_snippet(j[key]), lo, hi);
  return out;
}

std::vector<std::string> block_types(const Json& j, const char* key, int64_t levels, const char* a, const char* b,
                                     const std::string& what) {
  if (!is_set(j, key) || !j[key].is_array()) fail("{}: '{}' must be a list of block types", what, key);
  const Json& l = j[key];
  if ((int64_t)l.size() != levels)
    fail("{}: '{}' has {} entries, block_out_channels {}: one per level", what, key, l.size(), levels);
  std::vector<std::string> out;
  for (const Json& t : l) {
    std::string s = t.is_string() ? t.get<std::string>() : json_snippet(t);
    if (s != a && s != b) fail("{}: '{}' has '{}': not supported ({}, {})", what, key, s, a, b);
    out.push_back(s);
  }
  return out;
}

}  // namespace

UnetConfig parse_unet_config(const Json& j, const std::string& what) {
  if (!j.is_object()) fail("{}: must be a JSON object", what);
  UnetConfig c;
  c.source = what;
  auto size = [&](const char* key, int64_t dflt, int64_t lo, int64_t hi) {
    int64_t v = json_int_or(j, key, dflt, what);
    if (v < lo || v > hi) fail("{}: '{}' = {} is outside [{}, {}]", what, key, v, lo, hi);
    return v;
  };
  // Keys whose only supported value is null (or absence): each would add or change a computation.
  auto must_be_null = [&](const char* key) {
    if (is_set(j, key)) fail("{}: '{}' = {} is not supported (only null)", what, key, json_snippet(j[key]));
  };
  auto must_equal = [&](const char* key, const Json& want) {
    if (j.contains(key) && j[key] != want)
      fail("{}: '{}' = {} is not supported (only {})", what, key, json_snippet(j[key]), json_snippet(want));
  };
  if (is_set(j, "_class_name")) must_equal("_class_name", "UNet2DConditionModel");

  if (!is_set(j, "block_out_channels") || !j["block_out_channels"].is_array())
    fail("{}: 'block_out_channels' must be a list of channel counts", what);
  const Json& boc = j["block_out_channels"];
  if (boc.empty() || (int64_t)boc.size() > kMaxLevels)
    fail("{}: 'block_out_channels' has {} levels; 1 to {} are supported", what, boc.size(), kMaxLevels);
  for (const Json& v : boc) {
    if (!v.is_number_integer() && !v.is_number_unsigned())
      fail("{}: 'block_out_channels' = {}: entries must be integers", what, json_snippet(boc));
    int64_t ch = v.get<int64_t>();
    if (ch < 1 || ch > kMaxChannels) fail("{}: 'block_out_channels' entry {} is outside [1, {}]", what, ch, kMaxChannels);
    c.block_out_channels.push_back(ch);
  }
  const int64_t L = (int64_t)c.block_out_channels.size();
  c.in_channels = size("in_channels", 4, 1, 1024);
  c.out_channels = size("out_channels", 4, 1, 1024);
  c.down_block_types = block_types(j, "down_block_types", L, "CrossAttnDownBlock2D", "DownBlock2D", what);
  c.up_block_types = block_types(j, "up_block_types", L, "CrossAttnUpBlock2D", "UpBlock2D", what);
  if (j.contains("mid_block_type")) must_equal("mid_block_type", "UNetMidBlock2DCrossAttn");
  if (is_set(j, "layers_per_block") && j["layers_per_block"].is_array())
    fail("{}: 'layers_per_block' = {}: a list per level is not supported (one integer)", what,
         json_snippet(j["layers_per_block"]));
  c.layers_per_block = size("layers_per_block", 2, 1, 16);
  // diffusers' attention_head_dim is the number of heads (num_attention_heads = attention_head_dim;
  // 0.25.1 raises on num_attention_heads itself).
  must_be_null("num_attention_heads");
  c.heads = per_level(j, "attention_head_dim", 8, L, 1, 1024, what);
  c.transformer_layers = per_level(j, "transformer_layers_per_block", 1, L, 1, 64, what);
  must_be_null("reverse_transformer_layers_per_block");
  if (is_set(j, "cross_attention_dim") && j["cross_attention_dim"].is_array())
    fail("{}: 'cross_attention_dim' = {}: a list per level is not supported (one integer)", what,
         json_snippet(j["cross_attention_dim"]));
  c.cross_attention_dim = size("cross_attention_dim", 1280, 1, kMaxWidth);
  if (j.contains("norm_num_groups") && j["norm_num_groups"].is_null())
    fail("{}: 'norm_num_groups' = null (no output norm) is not supported", what);
  c.norm_groups = size("norm_num_groups", 32, 1, 1024);
  c.norm_eps = json_num_or(j, "norm_eps", 1e-5, what);
  if (!(c.norm_eps > 0 && c.norm_eps < 1)) fail("{}: 'norm_eps' = {} must lie in (0, 1)", what, c.norm_eps);
  c.linear_projection = json_bool_or(j, "use_linear_projection", false, what);
  c.flip_sin_to_cos = json_bool_or(j, "flip_sin_to_cos", true, what);
  c.freq_shift = json_num_or(j, "freq_shift", 0, what);
  if (!(std::fabs(c.freq_shift) <= 1e6)) fail("{}: 'freq_shift' = {} is out of range", what, c.freq_shift);

  // Every level's width splits into the GroupNorms' groups and, where it attends, into its heads
  // (the mid block attends at the last level's width with its heads).
  for (int64_t i = 0; i < L; i++) {
    int64_t ch = c.block_out_channels[(size_t)i];
    if (ch % c.norm_groups)
      fail("{}: block_out_channels entry {} is not a multiple of norm_num_groups {}", what, ch, c.norm_groups);
    bool attends = c.down_block_types[(size_t)i] == "CrossAttnDownBlock2D" ||
                   c.up_block_types[(size_t)(L - 1 - i)] == "CrossAttnUpBlock2D" || i == L - 1;
    if (attends && ch % c.heads[(size_t)i])
      fail("{}: level {}: {} channels do not split into attention_head_dim = {} heads", what, i, ch, c.heads[(size_t)i]);
  }
  auto check_half = [&](int64_t dim, const char* key) {  // get_timestep_embedding divides by half - shift
    if (dim / 2 > 0 && (double)(dim / 2) - c.freq_shift == 0)
      fail("{}: 'freq_shift' = {} equals half of {} ({}): the embedding's frequencies divide by zero", what,
           c.freq_shift, key, dim / 2);
  };
  check_half(c.block_out_channels[0], "block_out_channels[0]");

  // The time embedding: sinusoids -> Linear, SiLU, Linear, nothing else.
  must_equal("time_embedding_type", "positional");
  if (is_set(j, "time_embedding_dim") && json_int(j, "time_embedding_dim", what) != c.time_embed_dim())
    fail("{}: 'time_embedding_dim' = {} is not supported (only null or 4 x block_out_channels[0] = {})", what,
         json_snippet(j["time_embedding_dim"]), c.time_embed_dim());
  must_be_null("time_embedding_act_fn");
  must_be_null("timestep_post_act");
  must_be_null("time_cond_proj_dim");
  must_be_null("class_embed_type");
  must_be_null("num_class_embeds");
  must_be_null("encoder_hid_dim");
  must_be_null("encoder_hid_dim_type");
  std::string add = json_str_or(j, "addition_embed_type", "", what);
  if (add == "text_time") {
    c.addition_time_embed_dim = size("addition_time_embed_dim", 0, 1, 1 << 13);
    c.projection_class_embeddings_input_dim = size("projection_class_embeddings_input_dim", 0, 1, kMaxWidth);
    if (c.projection_class_embeddings_input_dim <= 6 * c.addition_time_embed_dim)
      fail("{}: 'projection_class_embeddings_input_dim' = {} leaves no room for the pooled text beside 6 x "
           "addition_time_embed_dim = {}",
           what, c.projection_class_embeddings_input_dim, 6 * c.addition_time_embed_dim);
    check_half(c.addition_time_embed_dim, "addition_time_embed_dim");
  } else if (!add.empty()) {
    fail("{}: 'addition_embed_type' = '{}' is not supported (null, text_time)", what, add);
  }

  // The blocks' variants.
  must_equal("act_fn", "silu");
  must_equal("resnet_time_scale_shift", "default");
  if (j.contains("resnet_out_scale_factor") && !(j["resnet_out_scale_factor"].is_number() && j["resnet_out_scale_factor"] == 1))
    fail("{}: 'resnet_out_scale_factor' = {} is not supported (only 1)", what, json_snippet(j["resnet_out_scale_factor"]));
  if (j.contains("mid_block_scale_factor") && !(j["mid_block_scale_factor"].is_number() && j["mid_block_scale_factor"] == 1))
    fail("{}: 'mid_block_scale_factor' = {} is not supported (only 1)", what, json_snippet(j["mid_block_scale_factor"]));
  must_equal("conv_in_kernel", 3);
  must_equal("conv_out_kernel", 3);
  must_equal("downsample_padding", 1);
  if (is_set(j, "center_input_sample")) must_equal("center_input_sample", false);
  if (is_set(j, "dual_cross_attention")) must_equal("dual_cross_attention", false);
  if (is_set(j, "only_cross_attention")) {
    const Json& o = j["only_cross_attention"];
    bool any = o.is_boolean() ? o.get<bool>() : true;
    if (o.is_array()) {
      any = false;
      for (const Json& e : o) any = any || !e.is_boolean() || e.get<bool>();
    }
    if (any) fail("{}: 'only_cross_attention' = {} is not supported (only false)", what, json_snippet(o));
  }
  if (is_set(j, "attention_type")) must_equal("attention_type", "default");
  must_be_null("cross_attention_norm");
  // Read and not refused: upcast_attention (a precision hint; kvad attends in f32 anyway),
  // dropout (training), sample_size (a default size), and keys only other block types read
  // (resnet_skip_time_act, mid_block_only_cross_attention, class_embeddings_concat,
  // addition_embed_type_num_heads).
  return c;
}

// ---- the model ----

namespace {

// A level of the down path (resnets, attentions, a stride-2 conv) or the up path (resnets taking
// the skips, attentions, nearest x2 + conv).
struct Level {
  std::vector<ResnetBlock> resnets;
  std::vector<SpatialTransformer> attentions;  // empty for DownBlock2D / UpBlock2D
  bool resample = false;
  Conv2d resampler;
};

// get_timestep_embedding in float32 as torch computes it: exp(-ln(10000) * i / (half - shift)),
// t * that, [sin | cos] or (flip_sin_to_cos) [cos | sin]; an odd width ends with a 0.
void sinusoid(float t, int64_t dim, bool flip, double shift, float* out) {
  const int64_t half = dim / 2;
  const float neg_log = (float)-std::log(10000.0), denom = (float)((double)half - shift);
  for (int64_t i = 0; i < half; i++) {
    float e = std::exp(neg_log * (float)i / denom);
    float a = t * e;
    out[flip ? half + i : i] = std::sin(a);
    out[flip ? i : half + i] = std::cos(a);
  }
  if (dim % 2) out[dim - 1] = 0;
}

Map as_map(const std::vector<float>& v, int64_t rows, int64_t cols) {
  Map m(rows, 1, 1, cols);
  m.v = v;
  return m;
}

}  // namespace

struct Unet::Impl {
  Linear time_1, time_2;  // time_embedding.linear_1 / linear_2
  Linear add_1, add_2;    // add_embedding.linear_1 / linear_2 (SDXL)
  Conv2d conv_in, conv_out;
  GroupNorm norm_out;
  std::vector<Level> down, up;
  Level mid;  // resnets 0 and 1 around attentions 0

  // The tensor table: every layer with its diffusers name and shape, in module order.
  TensorTable table(const UnetConfig& c) {
    TensorTable t;
    const int64_t L = (int64_t)c.block_out_channels.size(), E = c.time_embed_dim(), c0 = c.block_out_channels[0];
    const int64_t G = c.norm_groups, X = c.cross_attention_dim;
    auto ch = [&](int64_t i) { return c.block_out_channels[(size_t)i]; };
    t.push_back({"time_embedding.linear_1", &time_1, E, c0});
    t.push_back({"time_embedding.linear_2", &time_2, E, E});
    if (c.addition_time_embed_dim) {
      t.push_back({"add_embedding.linear_1", &add_1, E, c.projection_class_embeddings_input_dim});
      t.push_back({"add_embedding.linear_2", &add_2, E, E});
    }
    t.push_back({"conv_in", &conv_in, c0, c.in_channels, 3, 1, 1});
    down.resize((size_t)L);
    for (int64_t i = 0, in = c0; i < L; in = ch(i), i++) {
      Level& lv = down[(size_t)i];
      const std::string p = "down_blocks." + std::to_string(i) + ".";
      const bool attn = c.down_block_types[(size_t)i] == "CrossAttnDownBlock2D";
      lv.resnets.resize((size_t)c.layers_per_block);
      if (attn) lv.attentions.resize((size_t)c.layers_per_block);
      for (int64_t j = 0; j < c.layers_per_block; j++) {
        lv.resnets[(size_t)j].declare(t, p + "resnets." + std::to_string(j) + ".", j ? ch(i) : in, ch(i), E, G, c.norm_eps);
        if (attn)
          lv.attentions[(size_t)j].declare(t, p + "attentions." + std::to_string(j) + ".", ch(i), c.heads[(size_t)i],
                                           c.transformer_layers[(size_t)i], X, G, c.linear_projection);
      }
      lv.resample = i < L - 1;
      if (lv.resample) t.push_back({p + "downsamplers.0.conv", &lv.resampler, ch(i), ch(i), 3, 2, 1});
    }
    mid.resnets.resize(2);
    mid.attentions.resize(1);
    mid.resnets[0].declare(t, "mid_block.resnets.0.", ch(L - 1), ch(L - 1), E, G, c.norm_eps);
    mid.attentions[0].declare(t, "mid_block.attentions.0.", ch(L - 1), c.heads[(size_t)(L - 1)],
                              c.transformer_layers[(size_t)(L - 1)], X, G, c.linear_projection);
    mid.resnets[1].declare(t, "mid_block.resnets.1.", ch(L - 1), ch(L - 1), E, G, c.norm_eps);
    // Up block i works at level L-1-i; its resnets take [h | skip]: the previous block's output
    // first, then skips popped from the end of the down path's list (the last of each block comes
    // from the level below, hence `in`).
    up.resize((size_t)L);
    for (int64_t i = 0, prev = ch(L - 1); i < L; i++) {
      Level& lv = up[(size_t)i];
      const int64_t lvl = L - 1 - i, out = ch(lvl), in = ch(std::max<int64_t>(lvl - 1, 0)), n = c.layers_per_block + 1;
      const std::string p = "up_blocks." + std::to_string(i) + ".";
      const bool attn = c.up_block_types[(size_t)i] == "CrossAttnUpBlock2D";
      lv.resnets.resize((size_t)n);
      if (attn) lv.attentions.resize((size_t)n);
      for (int64_t j = 0; j < n; j++) {
        const int64_t skip = j == n - 1 ? in : out;
        lv.resnets[(size_t)j].declare(t, p + "resnets." + std::to_string(j) + ".", (j ? out : prev) + skip, out, E, G,
                                      c.norm_eps);
        if (attn)
          lv.attentions[(size_t)j].declare(t, p + "attentions." + std::to_string(j) + ".", out, c.heads[(size_t)lvl],
                                           c.transformer_layers[(size_t)lvl], X, G, c.linear_projection);
      }
      lv.resample = i < L - 1;
      if (lv.resample) t.push_back({p + "upsamplers.0.conv", &lv.resampler, out, out, 3, 1, 1});
      prev = out;
    }
    t.push_back({"conv_norm_out", &norm_out, c0, 0, 1, 1, 0, true, G, c.norm_eps});
    t.push_back({"conv_out", &conv_out, c.out_channels, c0, 3, 1, 1});
    return t;
  }
};

Unet::Unet(const UnetConfig& c, std::shared_ptr<Checkpoint> ck, WeightFormat fmt)
    : c_(c), impl_(std::make_unique<Impl>()) {
  load_table(impl_->table(c_), *ck, fmt);
}

Unet::~Unet() = default;

std::unique_ptr<Unet> Unet::load(const std::string& dir, WeightFormat fmt) {
  std::string cfg = join_path(dir, "config.json");
  if (!file_exists(cfg)) fail("{}: missing (a unet folder holds config.json and its weights)", cfg);
  UnetConfig c = parse_unet_config(read_json_file(cfg), cfg);
  std::shared_ptr<Checkpoint> ck = open_part_weights(dir);
  auto u = std::make_unique<Unet>(c, ck, fmt);
  ck->check_all_read({});
  return u;
}

Map Unet::predict(const UnetInput& in) const {
  const Impl& I = *impl_;
  const int64_t L = (int64_t)c_.block_out_channels.size(), E = c_.time_embed_dim(), c0 = c_.block_out_channels[0];
  if (!in.latents) fail("{}: UNet called without latents", c_.source);
  const Map& x = *in.latents;
  const int64_t B = x.n, multiple = int64_t(1) << (L - 1);
  if (B < 1 || x.c != c_.in_channels || x.h < 1 || x.w < 1 || x.h % multiple || x.w % multiple)
    fail("{}: latents [{}, {}, {}, {}] (n, h, w, c): {} channels and h, w multiples of {} expected", c_.source, x.n, x.h,
         x.w, x.c, c_.in_channels, multiple);
  if (!in.context || in.tokens < 1 || in.tokens > 1 << 16)
    fail("{}: the UNet needs a text context of 1 to 65536 tokens ({} given)", c_.source, in.context ? in.tokens : 0);
  const bool sdxl = c_.addition_time_embed_dim > 0;
  if (sdxl && (!in.pooled || !in.time_ids))
    fail("{}: addition_embed_type text_time needs the pooled text embeddings and the six time ids", c_.source);
  auto probe = [&](const char* name, const Map& m) {
    if (probe_) probe_(probe_ctx_, name, m);
  };

  // Each block of the call is one stage (in.run_stage): the server's engine runs a language
  // model's decode step between them.
  auto stage = [&](const std::function<void()>& work) { run_stage(in.run_stage, work); };
  std::vector<float> temb;
  Map h;
  stage([&] {
    // Time embedding: the same timestep for every row of the batch.
    std::vector<float> tp((size_t)(B * c0)), hid((size_t)(B * E)), emb((size_t)(B * E));
    for (int64_t b = 0; b < B; b++) sinusoid(in.timestep, c0, c_.flip_sin_to_cos, c_.freq_shift, tp.data() + b * c0);
    if (probe_) probe("time_proj", as_map(tp, B, c0));
    I.time_1.apply(tp.data(), B, hid.data());
    silu(hid.data(), B * E);
    I.time_2.apply(hid.data(), B, emb.data());
    if (probe_) probe("time_embedding", as_map(emb, B, E));
    if (sdxl) {
      // SDXL's micro-conditioning: each of the six numbers embedded like a timestep, appended to the
      // pooled text (text first), through add_embedding, added to the time embedding.
      const int64_t D = c_.addition_time_embed_dim, P = c_.projection_class_embeddings_input_dim, T = P - 6 * D;
      std::vector<float> ids((size_t)(B * 6 * D)), add_in((size_t)(B * P)), aug((size_t)(B * E));
      for (int64_t r = 0; r < B * 6; r++) sinusoid(in.time_ids[r], D, c_.flip_sin_to_cos, c_.freq_shift, ids.data() + r * D);
      if (probe_) probe("add_time_proj", as_map(ids, B * 6, D));
      for (int64_t b = 0; b < B; b++) {
        std::copy(in.pooled + b * T, in.pooled + (b + 1) * T, add_in.begin() + b * P);
        std::copy(ids.begin() + b * 6 * D, ids.begin() + (b + 1) * 6 * D, add_in.begin() + b * P + T);
      }
      I.add_1.apply(add_in.data(), B, hid.data());
      silu(hid.data(), B * E);
      I.add_2.apply(hid.data(), B, aug.data());
      if (probe_) probe("add_embedding", as_map(aug, B, E));
      for (size_t i = 0; i < emb.size(); i++) emb[i] += aug[i];
    }
    // Every ResNet block adds Linear(SiLU(emb)): the SiLU once here.
    silu(emb.data(), B * E);
    temb = std::move(emb);
    h = I.conv_in.apply(x);
  });
  probe("conv_in", h);
  // The skips: conv_in's output, then every resnet/attention output and every downsample.
  std::vector<Map> skips;
  skips.push_back(h);
  for (int64_t i = 0; i < L; i++) {
    const Level& lv = I.down[(size_t)i];
    for (size_t j = 0; j < lv.resnets.size(); j++) {
      stage([&] { h = lv.resnets[j].forward(h, temb); });
      if (!lv.attentions.empty()) stage([&] { lv.attentions[j].forward(h, in.context, in.tokens); });
      skips.push_back(h);
    }
    if (lv.resample) {
      stage([&] { h = lv.resampler.apply(h); });
      skips.push_back(h);
    }
    probe(("down_blocks." + std::to_string(i)).c_str(), h);
  }

  stage([&] { h = I.mid.resnets[0].forward(h, temb); });
  stage([&] { I.mid.attentions[0].forward(h, in.context, in.tokens); });
  stage([&] { h = I.mid.resnets[1].forward(h, temb); });
  probe("mid_block", h);

  for (int64_t i = 0; i < L; i++) {
    const Level& lv = I.up[(size_t)i];
    for (size_t j = 0; j < lv.resnets.size(); j++) {
      stage([&] {
        Map cat = concat_channels(h, skips.back());  // torch.cat([hidden, skip], dim=1)
        h = lv.resnets[j].forward(cat, temb);
      });
      skips.pop_back();
      if (!lv.attentions.empty()) stage([&] { lv.attentions[j].forward(h, in.context, in.tokens); });
    }
    if (lv.resample) stage([&] { h = lv.resampler.apply(upsample_nearest2x(h)); });
    probe(("up_blocks." + std::to_string(i)).c_str(), h);
  }

  stage([&] {
    if (probe_) {  // the hook sees the norm's output before the SiLU
      I.norm_out.apply(h, false);
      probe("conv_norm_out", h);
      silu(h.v.data(), (int64_t)h.v.size());
    } else {
      I.norm_out.apply(h, true);
    }
    h = I.conv_out.apply(h);
  });
  probe("conv_out", h);
  return h;
}

}  // namespace kvad::image
