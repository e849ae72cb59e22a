// CLIP text encoder (clip_text.h): transformers 4.31 modeling_clip.py's CLIPTextTransformer,
// written out. The matrices go through Weight::matmul (kvad's kernels); attention over at most
// 77 tokens and the element-wise steps are plain loops.
#include "image/clip_text.h"

#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/fs.h"
#include "image/pipeline_config.h"
#include "kernels/ops.h"

namespace kvad::image {

ClipTextConfig parse_clip_text_config(const Json& j, const std::string& what) {
  if (!j.is_object()) fail("{}: must be a JSON object", what);
  ClipTextConfig c;
  c.source = what;
  auto size = [&](const char* key, int64_t lo, int64_t hi) {
    int64_t v = json_int(j, key, what);
    if (v < lo || v > hi) fail("{}: '{}' = {} is outside [{}, {}]", what, key, v, lo, hi);
    return v;
  };
  c.hidden = size("hidden_size", 1, 1 << 14);
  c.layers = size("num_hidden_layers", 1, 256);
  c.heads = size("num_attention_heads", 1, 1024);
  if (c.hidden % c.heads) fail("{}: hidden_size {} is not a multiple of num_attention_heads {}", what, c.hidden, c.heads);
  c.intermediate = size("intermediate_size", 1, 1 << 16);
  c.positions = size("max_position_embeddings", 1, 4096);
  c.vocab = size("vocab_size", 1, 1 << 20);
  std::string act = json_str_or(j, "hidden_act", "quick_gelu", what);
  if (act == "quick_gelu") c.act = ClipTextConfig::Act::QuickGelu;
  else if (act == "gelu") c.act = ClipTextConfig::Act::Gelu;
  else fail("{}: 'hidden_act' = '{}' is not supported (quick_gelu, gelu)", what, act);
  c.eps = json_num_or(j, "layer_norm_eps", 1e-5, what);
  if (!(c.eps > 0 && c.eps < 1)) fail("{}: 'layer_norm_eps' = {} must lie in (0, 1)", what, c.eps);
  std::string arch;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string())
    arch = j["architectures"][0].get<std::string>();
  if (arch != "CLIPTextModel" && arch != "CLIPTextModelWithProjection")
    fail("{}: 'architectures' = ['{}'] is not a CLIP text model (CLIPTextModel, CLIPTextModelWithProjection)", what, arch);
  c.with_projection = arch == "CLIPTextModelWithProjection";
  if (c.with_projection) c.projection = size("projection_dim", 1, 1 << 14);
  return c;
}

std::vector<ClipTextEncoder::Decl> ClipTextEncoder::tensor_table() {
  const int64_t H = c_.hidden, F = c_.intermediate;
  const std::string m = "text_model.";
  std::vector<Decl> t = {
      {m + "embeddings.token_embedding.weight", {c_.vocab, H}, &token_embedding_, nullptr},
      {m + "embeddings.position_embedding.weight", {c_.positions, H}, nullptr, &position_embedding_},
  };
  layers_.resize((size_t)c_.layers);
  for (int64_t i = 0; i < c_.layers; i++) {
    Layer& L = layers_[(size_t)i];
    std::string p = m + "encoder.layers." + std::to_string(i) + ".";
    auto add = [&](std::vector<Decl> more) { t.insert(t.end(), more.begin(), more.end()); };
    add({{p + "layer_norm1.weight", {H}, nullptr, &L.ln1_w},        {p + "layer_norm1.bias", {H}, nullptr, &L.ln1_b},
         {p + "self_attn.q_proj.weight", {H, H}, &L.q, nullptr},    {p + "self_attn.q_proj.bias", {H}, nullptr, &L.q_b},
         {p + "self_attn.k_proj.weight", {H, H}, &L.k, nullptr},    {p + "self_attn.k_proj.bias", {H}, nullptr, &L.k_b},
         {p + "self_attn.v_proj.weight", {H, H}, &L.v, nullptr},    {p + "self_attn.v_proj.bias", {H}, nullptr, &L.v_b},
         {p + "self_attn.out_proj.weight", {H, H}, &L.o, nullptr},  {p + "self_attn.out_proj.bias", {H}, nullptr, &L.o_b},
         {p + "layer_norm2.weight", {H}, nullptr, &L.ln2_w},        {p + "layer_norm2.bias", {H}, nullptr, &L.ln2_b},
         {p + "mlp.fc1.weight", {F, H}, &L.fc1, nullptr},           {p + "mlp.fc1.bias", {F}, nullptr, &L.fc1_b},
         {p + "mlp.fc2.weight", {H, F}, &L.fc2, nullptr},           {p + "mlp.fc2.bias", {H}, nullptr, &L.fc2_b}});
  }
  t.push_back({m + "final_layer_norm.weight", {H}, nullptr, &final_w_});
  t.push_back({m + "final_layer_norm.bias", {H}, nullptr, &final_b_});
  if (c_.with_projection) t.push_back({"text_projection.weight", {c_.projection, H}, &projection_, nullptr});
  return t;
}

ClipTextEncoder::ClipTextEncoder(const ClipTextConfig& c, std::shared_ptr<Checkpoint> ck, WeightFormat fmt)
    : c_(c), file_(std::move(ck)) {
  for (const Decl& d : tensor_table()) {
    TensorView v = file_->get(d.name, d.shape);
    if (d.weight) {
      *d.weight = Weight::from_tensor(v, fmt);
      if (fmt != WeightFormat::AsStored) file_->release(v);  // converted: the copy is what runs
    }
    else *d.values = to_f32(v);
  }
  // Real checkpoints also carry the position_ids buffer (0..76), which is not a parameter.
  file_->check_all_read({"embeddings.position_ids"});
}

ClipTextEncoder ClipTextEncoder::load(const std::string& dir, WeightFormat fmt) {
  std::string cfg = join_path(dir, "config.json");
  if (!file_exists(cfg)) fail("{}: missing (a text encoder folder holds config.json and its weights)", cfg);
  ClipTextConfig c = parse_clip_text_config(read_json_file(cfg), cfg);
  return ClipTextEncoder(c, open_part_weights(dir), fmt);
}

void ClipTextEncoder::layer_forward(const Layer& L, std::vector<float>& h, int64_t T) const {
  const int64_t H = c_.hidden, F = c_.intermediate, D = c_.head_dim(), heads = c_.heads;
  const float eps = (float)c_.eps;
  auto bias = [](std::vector<float>& y, const std::vector<float>& b, int64_t rows) {
    int64_t n = (int64_t)b.size();
    for (int64_t r = 0; r < rows; r++)
      for (int64_t i = 0; i < n; i++) y[(size_t)(r * n + i)] += b[(size_t)i];
  };
  std::vector<float> x((size_t)(T * H)), q(x.size()), k(x.size()), v(x.size()), attn(x.size()), o(x.size());
  for (int64_t r = 0; r < T; r++)
    kernels::layernorm(&h[(size_t)(r * H)], L.ln1_w.data(), L.ln1_b.data(), eps, H, &x[(size_t)(r * H)]);
  L.q.matmul(x.data(), T, q.data());
  L.k.matmul(x.data(), T, k.data());
  L.v.matmul(x.data(), T, v.data());
  bias(q, L.q_b, T), bias(k, L.k_b, T), bias(v, L.v_b, T);
  const float scale = 1.0f / std::sqrt((float)D);  // q_proj(x) * head_dim**-0.5
  for (float& f : q) f *= scale;
  std::vector<float> p((size_t)T);
  for (int64_t hd = 0; hd < heads; hd++) {
    for (int64_t i = 0; i < T; i++) {
      const float* qi = &q[(size_t)(i * H + hd * D)];
      for (int64_t j = 0; j <= i; j++) {  // causal: position i sees 0..i
        const float* kj = &k[(size_t)(j * H + hd * D)];
        float s = 0;
        for (int64_t d = 0; d < D; d++) s += qi[d] * kj[d];
        p[(size_t)j] = s;
      }
      kernels::softmax(p.data(), i + 1);
      float* out = &attn[(size_t)(i * H + hd * D)];
      for (int64_t d = 0; d < D; d++) out[d] = 0;
      for (int64_t j = 0; j <= i; j++) {
        const float* vj = &v[(size_t)(j * H + hd * D)];
        for (int64_t d = 0; d < D; d++) out[d] += p[(size_t)j] * vj[d];
      }
    }
  }
  L.o.matmul(attn.data(), T, o.data());
  bias(o, L.o_b, T);
  for (size_t i = 0; i < h.size(); i++) h[i] += o[i];
  // MLP: fc2(act(fc1(LN2(h))))
  for (int64_t r = 0; r < T; r++)
    kernels::layernorm(&h[(size_t)(r * H)], L.ln2_w.data(), L.ln2_b.data(), eps, H, &x[(size_t)(r * H)]);
  std::vector<float> f((size_t)(T * F));
  L.fc1.matmul(x.data(), T, f.data());
  bias(f, L.fc1_b, T);
  if (c_.act == ClipTextConfig::Act::QuickGelu) {
    for (float& a : f) a = a / (1.0f + std::exp(-1.702f * a));  // x * sigmoid(1.702 x)
  } else {
    for (float& a : f) a = 0.5f * a * (1.0f + std::erf(a * (float)M_SQRT1_2));  // exact (erf) gelu
  }
  L.fc2.matmul(f.data(), T, o.data());
  bias(o, L.fc2_b, T);
  for (size_t i = 0; i < h.size(); i++) h[i] += o[i];
}

ClipTextOutput ClipTextEncoder::encode(const std::vector<int32_t>& ids) const {
  const int64_t T = (int64_t)ids.size(), H = c_.hidden;
  if (T < 1 || T > c_.positions)
    fail("{}: {} tokens: the text encoder takes 1 to {} (max_position_embeddings)", c_.source, T, c_.positions);
  std::vector<float> h((size_t)(T * H));
  int64_t eos_at = 0;
  for (int64_t t = 0; t < T; t++) {
    int32_t id = ids[(size_t)t];
    if (id < 0 || id >= c_.vocab) fail("{}: token id {} is outside the vocabulary (0 .. {})", c_.source, id, c_.vocab - 1);
    if (id > ids[(size_t)eos_at]) eos_at = t;  // argmax, first occurrence: the first EOS (the largest id)
    token_embedding_.row(id, &h[(size_t)(t * H)]);
    for (int64_t i = 0; i < H; i++) h[(size_t)(t * H + i)] += position_embedding_[(size_t)(t * H + i)];
  }
  ClipTextOutput out;
  out.tokens = T;
  out.hidden = H;
  for (int64_t l = 0; l < c_.layers; l++) {
    if (l == c_.layers - 1) out.penultimate = h;  // hidden_states[-2]: what the last layer receives
    layer_forward(layers_[(size_t)l], h, T);
  }
  out.last_hidden_state.resize(h.size());
  for (int64_t r = 0; r < T; r++)
    kernels::layernorm(&h[(size_t)(r * H)], final_w_.data(), final_b_.data(), (float)c_.eps, H,
                       &out.last_hidden_state[(size_t)(r * H)]);
  out.pooled.assign(out.last_hidden_state.begin() + eos_at * H, out.last_hidden_state.begin() + (eos_at + 1) * H);
  if (c_.with_projection) {
    out.text_embeds.resize((size_t)c_.projection);
    projection_.matmul(out.pooled.data(), 1, out.text_embeds.data());
  }
  return out;
}

}  // namespace kvad::image
