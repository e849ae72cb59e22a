// Stability's original checkpoint layout -> diffusers' names (single_file.h). The block
// arithmetic follows the original UNet's numbering: input_blocks.0 is conv_in, then each level
// has layers_per_block (ResNet [+ attention]) entries and, but for the last level, one
// downsampler; output_blocks has layers_per_block + 1 entries per level, the last of which carries
// the upsampler after its ResNet (and attention). The VAE decoder numbers its levels from the
// bottom (up.0 is diffusers' last up block).
#include "image/single_file.h"

#include <cstring>

#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"

namespace kvad::image {

PartCheckpoint::PartCheckpoint(std::shared_ptr<const void> keep, const std::string& source, const std::string& part,
                               bool file_mapped)
    : keep_(std::move(keep)), file_mapped_(file_mapped) {
  description_ = source + " (" + part + ")";
}

void PartCheckpoint::add(const std::string& name, TensorView view) {
  if (!tensors_.emplace(name, std::move(view)).second)
    fail("{}: two tensors of the file map to '{}'", description_, name);
}

std::vector<std::string> PartCheckpoint::names() const {
  std::vector<std::string> n;
  for (const auto& [k, v] : tensors_) n.push_back(k);
  return n;
}

const TensorView* PartCheckpoint::lookup(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

namespace {

bool starts(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

// Reads a decimal index at the front of s (up to the next '.'), advancing past the dot; -1 if none.
int64_t take_index(std::string& s) {
  size_t dot = s.find('.');
  if (dot == 0 || dot == std::string::npos || dot > 6) return -1;
  int64_t v = 0;
  for (size_t i = 0; i < dot; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (s[i] - '0');
  }
  s = s.substr(dot + 1);
  return v;
}

std::string unet_resnet(const std::string& r) {
  static const std::pair<const char*, const char*> renames[] = {
      {"in_layers.0.", "norm1."},        {"in_layers.2.", "conv1."},  {"emb_layers.1.", "time_emb_proj."},
      {"out_layers.0.", "norm2."},       {"out_layers.3.", "conv2."}, {"skip_connection.", "conv_shortcut."}};
  for (auto [from, to] : renames)
    if (starts(r, from)) return to + r.substr(std::strlen(from));
  return "";
}

std::string vae_resnet(const std::string& r) {
  for (const char* same : {"norm1.", "conv1.", "norm2.", "conv2."})
    if (starts(r, same)) return r;
  if (starts(r, "nin_shortcut.")) return "conv_shortcut." + r.substr(13);
  return "";
}

// `rest` follows "model.diffusion_model."; "" when the name is not one the layout has.
std::string unet_name(std::string rest, const SingleFileLayout& L) {
  const int64_t per = L.unet_layers_per_block;
  if (starts(rest, "time_embed.0.")) return "time_embedding.linear_1." + rest.substr(13);
  if (starts(rest, "time_embed.2.")) return "time_embedding.linear_2." + rest.substr(13);
  if (starts(rest, "label_emb.0.0.")) return "add_embedding.linear_1." + rest.substr(14);
  if (starts(rest, "label_emb.0.2.")) return "add_embedding.linear_2." + rest.substr(14);
  if (starts(rest, "input_blocks.0.0.")) return "conv_in." + rest.substr(17);
  if (starts(rest, "out.0.")) return "conv_norm_out." + rest.substr(6);
  if (starts(rest, "out.2.")) return "conv_out." + rest.substr(6);
  if (starts(rest, "middle_block.")) {
    rest = rest.substr(13);
    int64_t k = take_index(rest);
    if (k == 0 || k == 2) {
      std::string r = unet_resnet(rest);
      return r.empty() ? "" : "mid_block.resnets." + std::to_string(k / 2) + "." + r;
    }
    return k == 1 ? "mid_block.attentions.0." + rest : "";
  }
  if (starts(rest, "input_blocks.")) {
    rest = rest.substr(13);
    int64_t i = take_index(rest), k = take_index(rest);
    if (i < 1 || k < 0) return "";
    int64_t level = (i - 1) / (per + 1), j = (i - 1) % (per + 1);
    if (level >= L.unet_levels) return "";
    std::string block = "down_blocks." + std::to_string(level) + ".";
    if (j < per && k == 0) {
      std::string r = unet_resnet(rest);
      return r.empty() ? "" : block + "resnets." + std::to_string(j) + "." + r;
    }
    if (j < per && k == 1 && L.unet_down_attention[(size_t)level]) return block + "attentions." + std::to_string(j) + "." + rest;
    if (j == per && k == 0 && starts(rest, "op.") && level + 1 < L.unet_levels) return block + "downsamplers.0.conv." + rest.substr(3);
    return "";
  }
  if (starts(rest, "output_blocks.")) {
    rest = rest.substr(14);
    int64_t i = take_index(rest), k = take_index(rest);
    if (i < 0 || k < 0) return "";
    int64_t level = i / (per + 1), j = i % (per + 1);
    if (level >= L.unet_levels) return "";
    const bool attn = L.unet_up_attention[(size_t)level];
    std::string block = "up_blocks." + std::to_string(level) + ".";
    if (k == 0) {
      std::string r = unet_resnet(rest);
      return r.empty() ? "" : block + "resnets." + std::to_string(j) + "." + r;
    }
    if (k == 1 && attn) return block + "attentions." + std::to_string(j) + "." + rest;
    if (k == (attn ? 2 : 1) && j == per && starts(rest, "conv.") && level + 1 < L.unet_levels)
      return block + "upsamplers.0.conv." + rest.substr(5);
    return "";
  }
  return "";
}

// `rest` follows "first_stage_model."; sets `squeeze` for the attention's 1x1 convolutions.
std::string vae_name(std::string rest, const SingleFileLayout& L, bool& squeeze) {
  squeeze = false;
  if (starts(rest, "quant_conv.") || starts(rest, "post_quant_conv.")) return rest;
  std::string side;
  if (starts(rest, "encoder.")) side = "encoder.";
  else if (starts(rest, "decoder.")) side = "decoder.";
  else return "";
  rest = rest.substr(side.size());
  if (starts(rest, "conv_in.") || starts(rest, "conv_out.")) return side + rest;
  if (starts(rest, "norm_out.")) return side + "conv_norm_out." + rest.substr(9);
  if (starts(rest, "mid.block_1.") || starts(rest, "mid.block_2.")) {
    std::string r = vae_resnet(rest.substr(12));
    return r.empty() ? "" : side + "mid_block.resnets." + (rest[10] == '1' ? "0." : "1.") + r;
  }
  if (starts(rest, "mid.attn_1.")) {
    rest = rest.substr(11);
    const std::string a = side + "mid_block.attentions.0.";
    if (starts(rest, "norm.")) return a + "group_norm." + rest.substr(5);
    squeeze = true;
    for (auto [from, to] : {std::pair{"q.", "to_q."}, {"k.", "to_k."}, {"v.", "to_v."}, {"proj_out.", "to_out.0."}})
      if (starts(rest, from)) return a + to + rest.substr(std::strlen(from));
    return "";
  }
  const bool enc = side == "encoder.";
  if (!starts(rest, enc ? "down." : "up.")) return "";
  rest = rest.substr(enc ? 5 : 3);
  int64_t level = take_index(rest);
  if (level < 0 || level >= L.vae_levels) return "";
  // The decoder's up.0 is its last level (nearest the image): diffusers counts from the latent.
  std::string block = side + (enc ? "down_blocks." : "up_blocks.") + std::to_string(enc ? level : L.vae_levels - 1 - level) + ".";
  if (starts(rest, "block.")) {
    rest = rest.substr(6);
    int64_t j = take_index(rest);
    std::string r = j < 0 ? "" : vae_resnet(rest);
    return r.empty() ? "" : block + "resnets." + std::to_string(j) + "." + r;
  }
  if (enc && starts(rest, "downsample.conv.")) return block + "downsamplers.0.conv." + rest.substr(16);
  if (!enc && starts(rest, "upsample.conv.")) return block + "upsamplers.0.conv." + rest.substr(14);
  return "";
}

// OpenCLIP's text tower (SDXL's second encoder), `rest` after "conditioner.embedders.1.model.".
// Returns the transformers name; `slice` 0..2 picks q/k/v rows of the fused in_proj, `transpose`
// marks text_projection.
std::string openclip_name(std::string rest, int& slice, bool& transpose) {
  slice = -1, transpose = false;
  const std::string m = "text_model.";
  if (rest == "token_embedding.weight") return m + "embeddings.token_embedding.weight";
  if (rest == "positional_embedding") return m + "embeddings.position_embedding.weight";
  if (starts(rest, "ln_final.")) return m + "final_layer_norm." + rest.substr(9);
  if (rest == "text_projection") {
    transpose = true;
    return "text_projection.weight";
  }
  if (!starts(rest, "transformer.resblocks.")) return "";
  rest = rest.substr(22);
  int64_t i = take_index(rest);
  if (i < 0) return "";
  const std::string layer = m + "encoder.layers." + std::to_string(i) + ".";
  static const std::pair<const char*, const char*> renames[] = {
      {"ln_1.", "layer_norm1."}, {"ln_2.", "layer_norm2."}, {"attn.out_proj.", "self_attn.out_proj."},
      {"mlp.c_fc.", "mlp.fc1."}, {"mlp.c_proj.", "mlp.fc2."}};
  for (auto [from, to] : renames)
    if (starts(rest, from)) return layer + to + rest.substr(std::strlen(from));
  if (rest == "attn.in_proj_weight" || rest == "attn.in_proj_bias") {
    slice = 0;  // the caller adds the three slices
    return layer + "self_attn." + (rest == "attn.in_proj_weight" ? "weight" : "bias");
  }
  return "";
}

// Training-time buffers of the original LatentDiffusion module, and names that hold no weight.
bool leftover(const std::string& n) {
  static const char* buffers[] = {"betas", "alphas_cumprod", "alphas_cumprod_prev", "sqrt_alphas_cumprod",
                                  "sqrt_one_minus_alphas_cumprod", "log_one_minus_alphas_cumprod",
                                  "sqrt_recip_alphas_cumprod", "sqrt_recipm1_alphas_cumprod", "posterior_variance",
                                  "posterior_log_variance_clipped", "posterior_mean_coef1", "posterior_mean_coef2",
                                  "logvar", "lvlb_weights"};
  for (const char* b : buffers)
    if (n == b) return true;
  const size_t L = n.size();
  auto ends = [&](const char* s) { size_t k = std::strlen(s); return L >= k && n.compare(L - k, k, s) == 0; };
  return starts(n, "model_ema.") || ends("embeddings.position_ids") || n == "conditioner.embedders.1.model.logit_scale";
}

std::vector<bool> attention_levels(const Json& types, const std::string& what, const char* key) {
  std::vector<bool> v;
  if (!types.is_array()) fail("{}: '{}' must be a list of block types", what, key);
  for (const Json& t : types) v.push_back(t.is_string() && t.get<std::string>().rfind("CrossAttn", 0) == 0);
  return v;
}

}  // namespace

SingleFileLayout layout_from_base(const PipelineFolder& base) {
  SingleFileLayout L;
  const std::string unet_cfg = base.part("unet").dir + "/config.json", vae_cfg = base.part("vae").dir + "/config.json";
  Json u = read_json_file(unet_cfg), v = read_json_file(vae_cfg);
  if (!u.is_object() || !v.is_object()) fail("{} / {}: must be JSON objects", unet_cfg, vae_cfg);
  L.unet_down_attention = attention_levels(u.value("down_block_types", Json()), unet_cfg, "down_block_types");
  L.unet_up_attention = attention_levels(u.value("up_block_types", Json()), unet_cfg, "up_block_types");
  L.unet_levels = (int64_t)L.unet_down_attention.size();
  if (L.unet_levels < 1 || L.unet_levels > 8 || (int64_t)L.unet_up_attention.size() != L.unet_levels)
    fail("{}: down_block_types and up_block_types must list the same 1 to 8 levels", unet_cfg);
  L.unet_layers_per_block = json_int(u, "layers_per_block", unet_cfg);
  if (L.unet_layers_per_block < 1 || L.unet_layers_per_block > 16)
    fail("{}: 'layers_per_block' = {} is outside [1, 16]", unet_cfg, L.unet_layers_per_block);
  const Json& blocks = v.value("block_out_channels", Json());
  if (!blocks.is_array() || blocks.empty() || blocks.size() > 8)
    fail("{}: 'block_out_channels' must list 1 to 8 levels", vae_cfg);
  L.vae_levels = (int64_t)blocks.size();
  return L;
}

PipelineKind detect_single_file(const std::vector<TensorView>& tensors, const std::string& what) {
  bool sd15 = false, sdxl = false, sd2 = false, unet = false;
  for (const TensorView& t : tensors) {
    sd15 = sd15 || starts(t.name, "cond_stage_model.transformer.");
    sd2 = sd2 || starts(t.name, "cond_stage_model.model.");
    sdxl = sdxl || starts(t.name, "conditioner.embedders.1.");
    unet = unet || starts(t.name, "model.diffusion_model.");
  }
  if (!unet) fail("{}: no model.diffusion_model.* tensors: not a single-file Stable Diffusion checkpoint (a LoRA, a VAE or a UNet alone?)", what);
  if (sdxl) return PipelineKind::SDXL;
  if (sd15) return PipelineKind::SD15;
  if (sd2) fail("{}: an SD 2.x checkpoint (OpenCLIP text encoder under cond_stage_model.model): kvad reads SD 1.5 and SDXL", what);
  fail("{}: found the UNet but no text encoder (cond_stage_model.* or conditioner.embedders.*)", what);
}

SingleFile open_single_file(const std::string& path, const SingleFileLayout& L) {
  auto file = std::make_shared<SafetensorsFile>(path);
  return place_tensors(file->tensors(), file, path, L, /*file_mapped=*/true);
}

SingleFile place_tensors(const std::vector<TensorView>& tensors, std::shared_ptr<const void> keep, const std::string& path,
                         const SingleFileLayout& L, bool file_mapped) {
  SingleFile sf;
  sf.path = path;
  sf.kind = detect_single_file(tensors, path);
  sf.unet = std::make_shared<PartCheckpoint>(keep, path, "unet", file_mapped);
  sf.vae = std::make_shared<PartCheckpoint>(keep, path, "vae", file_mapped);
  sf.text_encoder = std::make_shared<PartCheckpoint>(keep, path, "text_encoder", file_mapped);
  if (sf.kind == PipelineKind::SDXL) sf.text_encoder_2 = std::make_shared<PartCheckpoint>(keep, path, "text_encoder_2", file_mapped);
  const std::string clip1 = sf.kind == PipelineKind::SDXL ? "conditioner.embedders.0.transformer." : "cond_stage_model.transformer.";
  const std::string clip2 = "conditioner.embedders.1.model.";

  for (const TensorView& t : tensors) {
    const std::string& n = t.name;
    if (leftover(n)) continue;
    std::string mapped;
    if (starts(n, "model.diffusion_model.")) {
      mapped = unet_name(n.substr(22), L);
      if (!mapped.empty()) sf.unet->add(mapped, t);
    } else if (starts(n, "first_stage_model.")) {
      bool squeeze = false;
      mapped = vae_name(n.substr(18), L, squeeze);
      if (!mapped.empty()) {
        TensorView v = t;
        if (squeeze && v.shape.size() != 1) {  // the weights; their biases are [c] already
          if (v.shape.size() != 4 || v.shape[2] != 1 || v.shape[3] != 1)
            fail("{}: '{}' has shape {}, expected [c, c, 1, 1]", path, n, t.shape_str());
          v.shape.resize(2);
        }
        sf.vae->add(mapped, v);
      }
    } else if (starts(n, clip1)) {
      std::string rest = n.substr(clip1.size());
      // Older files keep transformers' CLIPTextModel without its text_model level.
      mapped = starts(rest, "text_model.") ? rest : "text_model." + rest;
      sf.text_encoder->add(mapped, t);
    } else if (sf.text_encoder_2 && starts(n, clip2)) {
      int slice;
      bool transpose;
      mapped = openclip_name(n.substr(clip2.size()), slice, transpose);
      if (mapped.empty()) {
      } else if (slice == 0) {
        // in_proj: [3H, H] (or [3H]) -> q, k, v, each a third of the rows.
        if (t.shape.empty() || t.shape[0] % 3 || t.transposed)
          fail("{}: '{}' has shape {}, expected [3H, H] or [3H]", path, n, t.shape_str());
        const size_t part_bytes = t.nbytes / 3;
        const bool is_weight = mapped.size() > 6 && mapped.compare(mapped.size() - 6, 6, "weight") == 0;
        const std::string base = mapped.substr(0, mapped.rfind('.') + 1);
        const char* names[] = {"q_proj.", "k_proj.", "v_proj."};
        for (int s = 0; s < 3; s++) {
          TensorView v = t;
          v.shape[0] /= 3;
          v.data = t.data + part_bytes * (size_t)s;
          v.nbytes = part_bytes;
          sf.text_encoder_2->add(base + names[s] + (is_weight ? "weight" : "bias"), v);
        }
      } else if (transpose) {
        if (t.shape.size() != 2) fail("{}: '{}' has shape {}, expected [hidden, projection]", path, n, t.shape_str());
        TensorView v = t;  // stored [hidden, projection]; transformers' Linear weight is [projection, hidden]
        v.shape = {t.shape[1], t.shape[0]};
        v.transposed = true;
        sf.text_encoder_2->add(mapped, v);
      } else {
        sf.text_encoder_2->add(mapped, t);
      }
    }
    if (mapped.empty())
      fail("{}: tensor '{}' is not part of the {} layout kvad reads (configs from the base: {} UNet levels, {} layers per block)",
           path, n, pipeline_kind_name(sf.kind), L.unet_levels, L.unet_layers_per_block);
  }
  return sf;
}

void SingleFile::check_all_read() const {
  for (const auto* p : {&unet, &vae, &text_encoder, &text_encoder_2})
    if (*p) (*p)->check_all_read({});
}

}  // namespace kvad::image
