#include "runtime/embed.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"

namespace kvad {

const char* pooling_name(Pooling p) {
  switch (p) {
    case Pooling::Mean: return "mean";
    case Pooling::LastToken: return "last token";
    case Pooling::Cls: return "first token (cls)";
    case Pooling::Max: return "max";
    case Pooling::MeanSqrtLen: return "mean x sqrt(length)";
    case Pooling::WeightedMean: return "position-weighted mean";
  }
  return "?";
}

EmbeddingSpec embedding_spec(const std::string& model_dir) {
  EmbeddingSpec spec;
  const std::string modules_path = join_path(model_dir, "modules.json");
  if (!is_directory(model_dir) || !file_exists(modules_path)) return spec;
  Json modules = read_json_file(modules_path);
  if (!modules.is_array()) fail("{}: expected a list of modules", modules_path);
  std::string pooling_dir;
  for (const Json& m : modules) {
    std::string type = m.is_object() ? json_str_or(m, "type", "", modules_path) : "";
    std::string kind = type.substr(type.find_last_of('.') + 1);
    if (kind == "Transformer") continue;
    if (kind == "Pooling") {
      std::string sub = json_str_or(m, "path", "", modules_path);
      if (sub.empty() || sub[0] == '/' || sub.find("..") != std::string::npos)
        fail("{}: the Pooling module's path {} must be a folder inside the model", modules_path, json_snippet(Json(sub)));
      pooling_dir = join_path(model_dir, sub);
    }
    else if (kind == "Normalize") continue;
    else fail("{}: module '{}' is not supported (kvad pools and normalises; it has no {} layer)", modules_path,
              json_snippet(Json(type)), kind);
  }
  spec.normalize = std::any_of(modules.begin(), modules.end(), [](const Json& m) {
    return m.is_object() && m.contains("type") && m["type"].is_string() &&
           m["type"].get<std::string>().ends_with(".Normalize");
  });
  spec.source = "modules.json";
  if (pooling_dir.empty()) return spec;
  const std::string cfg_path = join_path(pooling_dir, "config.json");
  Json cfg = read_json_file(cfg_path);
  if (!cfg.is_object()) fail("{}: expected an object", cfg_path);
  const std::pair<const char*, Pooling> modes[] = {
      {"pooling_mode_mean_tokens", Pooling::Mean},       {"pooling_mode_lasttoken", Pooling::LastToken},
      {"pooling_mode_cls_token", Pooling::Cls},          {"pooling_mode_max_tokens", Pooling::Max},
      {"pooling_mode_mean_sqrt_len_tokens", Pooling::MeanSqrtLen},
      {"pooling_mode_weightedmean_tokens", Pooling::WeightedMean}};
  int on = 0;
  for (auto& [key, mode] : modes)
    if (cfg.contains(key) && cfg[key].is_boolean() && cfg[key].get<bool>()) on++, spec.pooling = mode;
  if (on != 1)
    fail("{}: {} pooling modes are set; kvad follows exactly one (sentence-transformers concatenates several)",
         cfg_path, on);
  spec.source = cfg_path;
  return spec;
}

namespace {

// Pools the hidden rows [n, H] of one input into out[H].
void pool(const float* rows, int64_t n, int64_t H, Pooling p, float* out) {
  if (p == Pooling::LastToken || p == Pooling::Cls) {  // one row: the engine gave the last, or take the first
    std::copy(rows, rows + H, out);
    return;
  }
  std::fill(out, out + H, p == Pooling::Max ? -INFINITY : 0.0f);
  double weights = 0;
  for (int64_t t = 0; t < n; t++) {
    const float* r = rows + t * H;
    if (p == Pooling::Max) {
      for (int64_t j = 0; j < H; j++) out[j] = std::max(out[j], r[j]);
      continue;
    }
    float w = p == Pooling::WeightedMean ? (float)(t + 1) : 1.0f;  // sentence-transformers: weights 1..n
    for (int64_t j = 0; j < H; j++) out[j] += w * r[j];
    weights += w;
  }
  if (p == Pooling::Max) return;
  double div = p == Pooling::MeanSqrtLen ? std::sqrt((double)n) : weights;
  for (int64_t j = 0; j < H; j++) out[j] = (float)(out[j] / div);
}

void normalise(std::vector<float>& v) {
  double ss = 0;
  for (float x : v) ss += (double)x * x;
  double norm = std::max(std::sqrt(ss), 1e-12);  // torch.nn.functional.normalize's eps
  for (float& x : v) x = (float)(x / norm);
}

}  // namespace

Embeddings embed(Engine& engine, const std::vector<std::vector<int32_t>>& inputs, const EmbeddingSpec& spec,
                 int64_t dimensions, int64_t rows_per_forward) {
  const int64_t H = engine.model().config().hidden;
  if (dimensions < 0 || dimensions > H)
    fail("dimensions must be between 1 and the model's width {}, got {}", H, dimensions);
  const bool last_only = spec.pooling == Pooling::LastToken;
  Embeddings r;
  r.vectors.resize(inputs.size());
  std::vector<float> hidden;
  for (size_t i0 = 0; i0 < inputs.size();) {
    // The inputs of one forward: as many as fit the row budget (at least one).
    size_t i1 = i0;
    int64_t rows = 0;
    while (i1 < inputs.size() && (i1 == i0 || rows + (int64_t)inputs[i1].size() <= rows_per_forward))
      rows += (int64_t)inputs[i1++].size();
    std::span<const std::vector<int32_t>> group(inputs.data() + i0, i1 - i0);
    engine.hidden_states(group, last_only, hidden);
    const float* at = hidden.data();
    for (size_t i = i0; i < i1; i++) {
      const int64_t n = (int64_t)inputs[i].size(), held = last_only ? 1 : n;
      r.vectors[i].resize((size_t)H);
      pool(at, held, H, spec.pooling, r.vectors[i].data());
      at += held * H;
      if (dimensions > 0) r.vectors[i].resize((size_t)dimensions);
      if (spec.normalize) normalise(r.vectors[i]);
      r.tokens += n;
    }
    i0 = i1;
  }
  return r;
}

}  // namespace kvad
