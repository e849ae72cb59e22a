// LoRA side path: y[:, out0 : out0 + out] += s (x Aᵀ) Bᵀ beside a frozen projection.
//   forward   t  = s x Aᵀ,   y += t Bᵀ
//   backward  dB = dyᵀ t,    dt = s dy B,   dA = dtᵀ x,   dx += dt A
// Each direction is rows x r x (in + out) multiply-adds, next to the base's rows x in x out.
#include "train/lora.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <tuple>
#include <unordered_map>
#include <type_traits>

#include <fmt/ranges.h>

#include "core/dtype.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/rng.h"
#include "core/threads.h"
#include "io/safetensors.h"
#include "train/checkpoint.h"
#include "train/layers.h"

namespace kvad::train {

double LoraConfig::scale() const { return rslora ? alpha / std::sqrt((double)rank) : alpha / (double)rank; }

const char* lora_site_name(LoraSite s) {
  static const char* names[kLoraSites] = {"qkv", "proj", "fc", "fc2"};
  return names[(int)s];
}

namespace {

constexpr const char* kPeftPrefix = "base_model.model.";

struct SiteDims {
  int64_t out, in;
};
SiteDims site_dims(const ModelShape& s, LoraSite site) {
  switch (site) {
    case LoraSite::Qkv: return {s.qkv_dim(), s.dim};
    case LoraSite::Proj: return {s.dim, s.q_dim()};
    case LoraSite::Fc: return {s.ffn_in(), s.dim};
    case LoraSite::Fc2: return {s.dim, s.ffn};
  }
  return {0, 0};
}

int64_t site_weight(const LayerParams& w, LoraSite site) {
  switch (site) {
    case LoraSite::Qkv: return w.qkv_w;
    case LoraSite::Proj: return w.proj_w;
    case LoraSite::Fc: return w.fc_w;
    case LoraSite::Fc2: return w.fc2_w;
  }
  return -1;
}

// PEFT's rule: a target covers the module it names or any whose name ends with "." + it.
bool covers(const std::string& target, const std::string& module) {
  return module == target || (module.size() > target.size() && module.ends_with("." + target));
}

// Every projection of the model as a piece (offsets a, b unset): the hf_tensors() matrices that
// lie inside one of a layer's four fused weights, so names and row ranges have one source.
std::vector<LoraPiece> all_projections(const ModelShape& s) {
  const ParamLayout base = make_layout(s);
  std::vector<LoraPiece> out;
  for (const HfTensor& t : hf_tensors(s, base)) {
    if (t.cols == 0 || !t.name.ends_with(".weight")) continue;
    for (int64_t l = 0; l < s.layers; l++)
      for (int k = 0; k < kLoraSites; k++) {
        const LoraSite site = (LoraSite)k;
        const SiteDims d = site_dims(s, site);
        const int64_t w0 = site_weight(base.layers[(size_t)l], site);
        if (t.offset < w0 || t.offset >= w0 + d.out * d.in) continue;
        if (t.cols != d.in || (t.offset - w0) % d.in) fail("internal: {} is not a row range of its site", t.name);
        out.push_back({t.name.substr(0, t.name.size() - 7), l, site, (t.offset - w0) / d.in, t.rows, d.in, d.out, 0, 0});
      }
  }
  std::stable_sort(out.begin(), out.end(), [](const LoraPiece& a, const LoraPiece& b) {
    return std::tuple(a.layer, (int)a.site, a.out0) < std::tuple(b.layer, (int)b.site, b.out0);
  });
  return out;
}

std::string last_component(const std::string& m) { return m.substr(m.rfind('.') + 1); }

template <typename T>
void scale_values(T* v, int64_t n, T s) {
  for (int64_t i = 0; i < n; i++) v[i] *= s;
}

// C [M, N] = op(A) B with M a rank (a few rows): the threads split the columns. Split by rows,
// as gemm() would choose for two tiles of rows, every thread would pack all of B for a sliver.
template <typename T>
void gemm_few_rows(int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, bool ta, const T* B, int64_t ldb, T* C,
                   int64_t ldc) {
  if (!std::is_same_v<T, float> || (double)M * (double)N * (double)K < 1e5)
    return gemm_t<T>(M, N, K, A, lda, ta, B, ldb, false, C, ldc, false, nullptr, false);
  pool().parallel_for(N, 64, [&](int64_t n0, int64_t n1) {
    gemm_t<T>(M, n1 - n0, K, A, lda, ta, B + n0, ldb, false, C + n0, ldc, false, nullptr, false);
  });
}

}  // namespace

LoraLayout make_lora_layout(const ModelShape& shape, const LoraConfig& cfg) {
  LoraLayout L;
  L.config = cfg;
  L.shape = shape;
  L.shape.finalize();  // the widths the model will have (ffn, kv_heads defaults)
  const std::vector<LoraPiece> all = all_projections(L.shape);
  std::set<std::string> kinds;
  for (const LoraPiece& p : all) kinds.insert(last_component(p.module));
  L.valid_targets.assign(kinds.begin(), kinds.end());
  const std::string valid = fmt::format("{}, or all-linear", fmt::join(L.valid_targets, ", "));
  if (!(cfg.alpha > 0) || !std::isfinite(cfg.alpha)) fail("LoRA alpha = {} must be a positive number", cfg.alpha);
  if (cfg.rank < 1) fail("LoRA rank = {} must be at least 1", cfg.rank);
  if (cfg.targets.empty()) fail("no LoRA target modules: name some of {}", valid);
  // Deduplicated, in the order given.
  L.config.targets.clear();
  for (const std::string& t : cfg.targets)
    if (std::find(L.config.targets.begin(), L.config.targets.end(), t) == L.config.targets.end())
      L.config.targets.push_back(t);
  const bool all_linear = L.config.targets == std::vector<std::string>{"all-linear"};
  for (const std::string& t : L.config.targets) {
    if (t == "all-linear" && !all_linear) fail("LoRA target all-linear stands alone (it already covers every projection)");
    bool any = all_linear;
    for (const LoraPiece& p : all) any = any || covers(t, p.module);
    if (!any) fail("LoRA target module '{}' is not a projection of this {} model: {}", t, arch_name(shape.arch), valid);
  }
  for (const LoraPiece& p : all) {
    bool take = all_linear;
    for (const std::string& t : L.config.targets) take = take || covers(t, p.module);
    if (!take) continue;
    if (cfg.rank > std::min(p.in, p.out))
      fail("LoRA rank {} is larger than {} allows: min(in {}, out {}) = {}", cfg.rank, p.module, p.in, p.out,
           std::min(p.in, p.out));
    LoraPiece q = p;
    auto add = [&](const std::string& name, int64_t rows, int64_t cols) {
      ParamInfo info;
      info.name = name, info.shape = {rows, cols}, info.offset = L.params.total, info.size = rows * cols;
      info.decay = true;
      L.params.tensors.push_back(info);
      L.params.total += info.size;
      return info.offset;
    };
    q.a = add(p.module + ".lora_A.weight", cfg.rank, p.in);
    q.b = add(p.module + ".lora_B.weight", p.out, cfg.rank);
    L.pieces.push_back(std::move(q));
  }
  L.first.assign((size_t)(shape.layers * kLoraSites + 1), 0);
  for (const LoraPiece& p : L.pieces) L.first[(size_t)(p.layer * kLoraSites + (int)p.site) + 1]++;
  for (size_t i = 1; i < L.first.size(); i++) L.first[i] += L.first[i - 1];
  return L;
}

template <typename T>
void lora_init(T* adapter, const LoraLayout& L, uint64_t seed) {
  Rng rng(seed);
  const int64_t r = L.config.rank;
  for (const LoraPiece& p : L.pieces) {
    const double bound = 1.0 / std::sqrt((double)p.in);
    for (int64_t i = 0; i < r * p.in; i++) adapter[p.a + i] = (T)((2.0 * rng.uniform() - 1.0) * bound);
    std::fill(adapter + p.b, adapter + p.b + p.out * r, T(0));
  }
}

template <typename T>
void lora_fwd(T* y, int64_t ldy, T* t, const T* x, const T* A, const T* B, int64_t rows, int64_t in, int64_t out,
              int64_t r, T scale) {
  gemm_t<T>(rows, r, in, x, in, false, A, in, true, t, r, false, nullptr);
  scale_values(t, rows * r, scale);
  gemm_t<T>(rows, out, r, t, r, false, B, r, true, y, ldy, true, nullptr);
}

template <typename T>
void lora_bwd(T* dx, T* dA, T* dB, T* dt, const T* dy, int64_t ldy, const T* x, const T* t, const T* A, const T* B,
              int64_t rows, int64_t in, int64_t out, int64_t r, T scale) {
  gemm_t<T>(out, r, rows, dy, ldy, true, t, r, false, dB, r, false, nullptr);
  gemm_t<T>(rows, r, out, dy, ldy, false, B, r, false, dt, r, false, nullptr);
  scale_values(dt, rows * r, scale);
  gemm_few_rows<T>(r, in, rows, dt, r, true, x, in, dA, in);
  if (dx) gemm_t<T>(rows, in, r, dt, r, false, A, in, false, dx, in, true, nullptr);
}

template <typename T>
void lora_merge(T* params, const ParamLayout& base, const LoraLayout& L, const T* adapter) {
  const int64_t r = L.config.rank;
  for (const LoraPiece& p : L.pieces) {
    std::vector<T> sb(adapter + p.b, adapter + p.b + p.out * r);
    scale_values(sb.data(), p.out * r, (T)L.scale());
    T* w = params + site_weight(base.layers[(size_t)p.layer], p.site) + p.out0 * p.in;
    gemm_t<T>(p.out, p.in, r, sb.data(), r, false, adapter + p.a, p.in, false, w, p.in, true, nullptr);
  }
}

#define KVAD_INSTANTIATE(T)                                                                                      \
  template void lora_init<T>(T*, const LoraLayout&, uint64_t);                                                   \
  template void lora_fwd<T>(T*, int64_t, T*, const T*, const T*, const T*, int64_t, int64_t, int64_t, int64_t, T); \
  template void lora_bwd<T>(T*, T*, T*, T*, const T*, int64_t, const T*, const T*, const T*, const T*, int64_t,   \
                            int64_t, int64_t, int64_t, T);                                                       \
  template void lora_merge<T>(T*, const ParamLayout&, const LoraLayout&, const T*);
KVAD_INSTANTIATE(float)
KVAD_INSTANTIATE(double)
#undef KVAD_INSTANTIATE

// ---- The PEFT folder.

namespace {

Json peft_config(const LoraLayout& L, const AdapterSaveInfo& info) {
  std::set<std::string> targets;
  if (L.config.targets == std::vector<std::string>{"all-linear"}) {
    for (const LoraPiece& p : L.pieces) targets.insert(last_component(p.module));  // as PEFT saves it
  } else {
    targets.insert(L.config.targets.begin(), L.config.targets.end());
  }
  const double alpha = L.config.alpha;
  Json j = {{"peft_type", "LORA"},
            {"task_type", "CAUSAL_LM"},
            {"r", L.config.rank},
            {"lora_alpha", alpha == std::floor(alpha) && alpha < 1e15 ? Json((int64_t)alpha) : Json(alpha)},
            {"use_rslora", L.config.rslora},
            {"target_modules", std::vector<std::string>(targets.begin(), targets.end())},
            {"lora_dropout", 0.0},
            {"bias", "none"},
            {"fan_in_fan_out", L.shape.arch == Arch::Gpt2},
            {"inference_mode", true},
            {"init_lora_weights", true},
            {"use_dora", false},
            {"modules_to_save", nullptr},
            {"base_model_name_or_path", info.base_model}};
  if (!info.kvad.empty()) j["kvad"] = info.kvad;
  return j;
}

std::string peft_name(const ParamInfo& p) { return kPeftPrefix + p.name; }

// A file holds one or more sets of the adapter's tensors, each set's names under its prefix
// ("" for the weights; "adamw.m." and "adamw.v." for the optimiser's moments).
template <typename P>
using TensorSets = std::vector<std::pair<std::string, P>>;

void write_sets(const std::string& path, const ParamLayout& L, const TensorSets<const float*>& sets) {
  std::vector<TensorToWrite> specs;
  std::vector<const float*> src;
  for (const auto& [prefix, values] : sets)
    for (const ParamInfo& p : L.tensors) {
      specs.push_back({prefix + peft_name(p), DType::F32, p.shape, ""});
      src.push_back(values + p.offset);
    }
  write_safetensors(path, specs, [&](size_t i) {
    return std::string((const char*)src[i], (size_t)(specs[i].shape[0] * specs[i].shape[1]) * sizeof(float));
  });
}

// The tensor's values as f32 into dst (F32, BF16 or F16; every value finite).
void read_values(const TensorView& t, const std::string& path, float* dst) {
  const int64_t n = t.numel();
  if (t.dtype == DType::F32) {
    std::memcpy(dst, t.data, (size_t)n * 4);
  } else if (t.dtype == DType::BF16 || t.dtype == DType::F16) {
    for (int64_t i = 0; i < n; i++) {
      uint16_t h;
      std::memcpy(&h, t.data + 2 * i, 2);
      dst[i] = t.dtype == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
    }
  } else {
    fail("{}: tensor '{}' is {}; an adapter's tensors must be F32, BF16 or F16", path, t.name, dtype_name(t.dtype));
  }
  for (int64_t i = 0; i < n; i++)
    if (!std::isfinite(dst[i])) fail("{}: tensor '{}' holds {} at element {}", path, t.name, dst[i], i);
}

// Reads every set from `path`, refusing missing, misshapen and unknown tensors by name.
void read_sets(const std::string& path, const ParamLayout& L, const TensorSets<float*>& sets) {
  SafetensorsFile f(path);
  std::unordered_map<std::string, const TensorView*> by_name;
  for (const TensorView& t : f.tensors()) by_name[t.name] = &t;
  for (const auto& [prefix, dst] : sets)
    for (const ParamInfo& p : L.tensors) {
      const std::string name = prefix + peft_name(p);
      auto it = by_name.find(name);
      if (it == by_name.end()) fail("{}: no tensor '{}' (an adapter with other targets?)", path, name);
      if (it->second->shape != p.shape)
        fail("{}: tensor '{}' is {}, expected [{}]", path, name, it->second->shape_str(), fmt::join(p.shape, ", "));
      read_values(*it->second, path, dst + p.offset);
      by_name.erase(it);
    }
  if (!by_name.empty()) fail("{}: tensor '{}' is not one of this adapter's", path, by_name.begin()->first);
}

}  // namespace

void save_peft_adapter(const std::string& dir, const LoraLayout& L, const float* adapter, const AdapterSaveInfo& info) {
  const Json config = peft_config(L, info);
  write_directory_atomically(dir, [&](const std::string& tmp) {
    atomic_write_file(join_path(tmp, "adapter_config.json"), config.dump(2) + "\n");
    write_sets(join_path(tmp, "adapter_model.safetensors"), L.params, {{"", adapter}});
    if (info.adam_m && info.adam_v)
      write_sets(join_path(tmp, "optimizer.safetensors"), L.params, {{"adamw.m.", info.adam_m}, {"adamw.v.", info.adam_v}});
    if (!info.state.is_null()) atomic_write_file(join_path(tmp, "trainer_state.json"), info.state.dump(1) + "\n");
  });
}

LoadedAdapter load_peft_adapter(const std::string& dir, const LoraLayout& expected) {
  const std::string cfg_path = join_path(dir, "adapter_config.json");
  const std::string st_path = join_path(dir, "adapter_model.safetensors");
  if (!is_directory(dir)) fail("{}: no such adapter folder", dir);
  if (!file_exists(cfg_path)) fail("{}: no adapter_config.json: not a PEFT LoRA adapter folder", dir);
  if (!file_exists(st_path)) fail("{}: no adapter_model.safetensors", dir);
  LoadedAdapter out;
  out.config = read_json_file(cfg_path);
  const Json& c = out.config;
  if (!c.is_object()) fail("{}: not a JSON object", cfg_path);
  const LoraConfig& want = expected.config;
  if (std::string type = json_str_or(c, "peft_type", "LORA", cfg_path); type != "LORA")
    fail("{}: peft_type is '{}', not LORA", cfg_path, type);
  if (int64_t r = json_int(c, "r", cfg_path); r != want.rank)
    fail("{}: r = {}, but this run trains rank {}", cfg_path, r, want.rank);
  if (!c.contains("lora_alpha")) fail("{}: no lora_alpha", cfg_path);
  if (double a = json_num_or(c, "lora_alpha", 0, cfg_path); std::fabs(a - want.alpha) > 1e-9 * std::fabs(want.alpha))
    fail("{}: lora_alpha = {}, but this run uses {}", cfg_path, a, want.alpha);
  if (bool rs = json_bool_or(c, "use_rslora", false, cfg_path); rs != want.rslora)
    fail("{}: use_rslora = {}, but this run has it {}", cfg_path, rs, want.rslora ? "on" : "off");
  if (json_bool_or(c, "use_dora", false, cfg_path)) fail("{}: use_dora = true: DoRA is not trained by kvad", cfg_path);
  if (std::string bias = json_str_or(c, "bias", "none", cfg_path); bias != "none")
    fail("{}: bias = '{}': kvad trains adapters without biases (\"none\")", cfg_path, bias);
  for (const char* key : {"modules_to_save", "layers_to_transform", "rank_pattern", "alpha_pattern"})
    if (auto it = c.find(key); it != c.end() && !it->is_null() && !it->empty())
      fail("{}: {} = {} is not supported", cfg_path, key, json_snippet(*it));
  // The modules the file's target_modules cover, on this model, against the run's.
  LoraConfig theirs = want;
  theirs.targets.clear();
  auto tm = c.find("target_modules");
  if (tm != c.end() && tm->is_string()) theirs.targets.push_back(tm->get<std::string>());
  else if (tm != c.end() && tm->is_array())
    for (const Json& m : *tm) {
      if (!m.is_string()) fail("{}: target_modules holds {}, not a module name", cfg_path, json_snippet(m));
      theirs.targets.push_back(m.get<std::string>());
    }
  else fail("{}: target_modules must be a list of module names or \"all-linear\"", cfg_path);
  std::vector<LoraPiece> their_pieces;
  try {
    their_pieces = make_lora_layout(expected.shape, theirs).pieces;
  } catch (const Error& e) {
    fail("{}: {}", cfg_path, e.what());
  }
  std::set<std::string> file_modules, run_modules;
  for (const LoraPiece& p : their_pieces) file_modules.insert(p.module);
  for (const LoraPiece& p : expected.pieces) run_modules.insert(p.module);
  for (const std::string& m : file_modules)
    if (!run_modules.count(m))
      fail("{}: target_modules {} adapt {}, which this run's targets ({}) do not", cfg_path, json_snippet(*tm), m,
           fmt::join(want.targets, ", "));
  for (const std::string& m : run_modules)
    if (!file_modules.count(m))
      fail("{}: this run adapts {}, which the adapter's target_modules {} do not cover", cfg_path, m,
           json_snippet(*tm));

  out.adapter.assign((size_t)expected.total(), 0.0f);
  read_sets(st_path, expected.params, {{"", out.adapter.data()}});
  const std::string opt_path = join_path(dir, "optimizer.safetensors");
  if (file_exists(opt_path)) {
    out.adam_m.assign((size_t)expected.total(), 0.0f);
    out.adam_v.assign((size_t)expected.total(), 0.0f);
    read_sets(opt_path, expected.params, {{"adamw.m.", out.adam_m.data()}, {"adamw.v.", out.adam_v.data()}});
  }
  const std::string state_path = join_path(dir, "trainer_state.json");
  if (file_exists(state_path)) out.state = read_json_file(state_path);
  return out;
}

}  // namespace kvad::train
