#include "runtime/model_info.h"

#include <filesystem>
#include <map>
#include <set>

#include "core/dtype.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include "core/text.h"
#include "io/hub.h"
#include "io/safetensors.h"
#include "models/registry.h"

namespace kvad {

namespace {

// architectures[0], else model_type, else "".
std::string named_architecture(const Json& cfg) {
  if (!cfg.is_object()) return "";
  auto a = cfg.find("architectures");
  if (a != cfg.end() && a->is_array() && !a->empty() && (*a)[0].is_string()) return (*a)[0].get<std::string>();
  auto t = cfg.find("model_type");
  if (t != cfg.end() && t->is_string()) return t->get<std::string>();
  return "";
}

}  // namespace

ModelFolderInfo describe_model_folder(const std::string& dir) {
  ModelFolderInfo info;
  std::string cfg_path = join_path(dir, "config.json");
  try {
    Json cfg = read_json_file(cfg_path);
    info.architecture = named_architecture(cfg);
    if (const Architecture* a = find_architecture(cfg)) {
      try {
        ModelConfig c = a->parse_config(cfg, cfg_path);
        info.architecture = a->name;
        info.context_length = c.max_positions;
        info.supported = true;
      } catch (const Error&) {
        info.problem = "invalid config";
      }
    } else {
      info.problem = "unsupported: " + (info.architecture.empty() ? std::string("?") : info.architecture);
    }
  } catch (const std::exception&) {
    info.problem = "unreadable config.json";
    return info;
  }
  auto set_problem = [&](const std::string& p) {
    if (info.problem.empty()) info.problem = p;
    info.supported = false;
  };
  std::vector<std::string> shards;
  std::string index = join_path(dir, "model.safetensors.index.json");
  try {
    if (file_exists(index)) shards = hf::parse_index_shards(read_file(index), index);
    else shards = {"model.safetensors"};
  } catch (const std::exception&) {
    set_problem("bad index");
    return info;
  }
  std::map<std::string, int64_t> by_dtype;
  for (const std::string& s : shards) {
    std::string p = join_path(dir, s);
    if (!file_exists(p)) {
      set_problem(file_exists(index) ? "incomplete (run kvad pull)" : "no .safetensors weights");
      return info;
    }
    std::error_code ec;
    uint64_t size = std::filesystem::file_size(p, ec);  // through HF cache symlinks to the blob
    if (!ec) info.weight_bytes += size;
    try {
      SafetensorsFile f(p);
      for (const TensorView& t : f.tensors()) {
        info.parameters += t.numel();
        by_dtype[ascii_lower(dtype_name(t.dtype))] += t.numel();
      }
    } catch (const std::exception&) {
      set_problem("unreadable safetensors");
      return info;
    }
  }
  int64_t best = -1;
  for (auto& [d, n] : by_dtype) {
    info.dtypes += (info.dtypes.empty() ? "" : "+") + d;
    if (n > best) best = n, info.dtype = d;
  }
  std::string tc = join_path(dir, "tokenizer_config.json");
  try {
    if (file_exists(tc)) {
      Json t = read_json_file(tc);
      info.chat = t.is_object() && t.contains("chat_template") && !t["chat_template"].is_null();
    }
  } catch (const std::exception&) {
  }
  if (!file_exists(join_path(dir, "tokenizer.json"))) set_problem("no tokenizer.json");
  return info;
}

}  // namespace kvad
