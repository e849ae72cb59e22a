#include "serve/catalog.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "core/dtype.h"
#include "core/fs.h"
#include "io/hf_cache.h"
#include "io/safetensors.h"
#include "io/store.h"
#include "models/registry.h"
#include "runtime/model_info.h"
#include "serve/openai.h"

namespace kvad::serve {

namespace fs = std::filesystem;

ModelEntry describe_model(const std::string& dir, const std::string& name, const std::string& source) {
  ModelEntry e;
  e.name = name;
  e.path = dir;
  e.source = source;
  ModelFolderInfo info = describe_model_folder(dir);  // the same description `kvad ls` prints
  e.architecture = info.architecture;
  e.supported = info.supported;
  e.problem = info.problem;
  if (info.problem.rfind("unsupported", 0) == 0)
    e.problem = "architecture not supported (kvad runs: " + supported_architectures() + ")";
  e.parameters = info.parameters;
  e.format = info.dtypes;
  e.context_length = info.context_length;
  e.chat = info.chat;
  e.bytes = info.weight_bytes;  // the model's weights, not the optimizer state a trained model keeps beside them
  return e;
}

std::vector<ModelEntry> list_models(const std::vector<std::string>& dirs) {
  std::vector<ModelEntry> out;
  std::error_code ec;
  std::set<std::string> seen;
  auto scan = [&](const std::string& root, bool store) {
    if (!store && file_exists(join_path(root, "config.json"))) {
      if (seen.insert(fs::weakly_canonical(root, ec).string()).second) out.push_back(describe_model(root, root, "folder"));
      return;
    }
    std::vector<fs::path> subs;
    for (const auto& d : fs::directory_iterator(root, ec))
      if (d.is_directory(ec) && file_exists(join_path(d.path().string(), "config.json"))) subs.push_back(d.path());
    std::sort(subs.begin(), subs.end());
    for (const fs::path& p : subs) {
      if (!seen.insert(fs::weakly_canonical(p, ec).string()).second) continue;
      std::string name = store ? p.filename().string() : p.string();
      out.push_back(describe_model(p.string(), name, store ? "store" : "folder"));
    }
  };
  try {
    scan(store_models_dir(), true);
  } catch (const Error&) {  // no HOME: no store
  }
  // The Hugging Face cache (what kvad pull fetched), one entry per snapshot with a config.json.
  try {
    for (const hf::CachedRepo& repo : hf::scan_cache(hf::hub_cache_dir())) {
      for (const hf::CachedSnapshot& snap : repo.snapshots) {
        if (!snap.has("config.json")) continue;
        bool main = std::find(snap.refs.begin(), snap.refs.end(), "main") != snap.refs.end();
        std::string label = main ? repo.repo_id
                            : !snap.refs.empty() ? repo.repo_id + "@" + snap.refs[0]
                                                 : repo.repo_id + "@" + snap.commit.substr(0, 12);
        out.push_back(describe_model(join_path(join_path(repo.dir, "snapshots"), snap.commit), label, "hf"));
      }
    }
  } catch (const Error&) {  // no readable cache: nothing to list
  }
  for (const std::string& d : dirs) scan(d, false);
  return out;
}

Json to_json(const ModelEntry& e) {
  return {{"name", e.name},
          {"path", e.path},
          {"source", e.source},
          {"architecture", e.architecture},
          {"supported", e.supported},
          {"parameters", e.parameters},
          {"bytes", e.bytes},
          {"format", e.format},
          {"context_length", e.context_length},
          {"chat", e.chat},
          {"problem", e.problem.empty() ? Json(nullptr) : Json(e.problem)}};
}

void remove_from_store(const std::string& name) {
  auto dir = find_in_store(name);
  if (!dir || name.find('/') != std::string::npos)
    throw HttpError(404, fmt::format("'{}' is not a model in kvad's store ({}); only store models can be removed", name,
                                     store_models_dir()),
                    "invalid_request_error", "name", "model_not_found");
  std::error_code ec;
  fs::remove_all(*dir, ec);
  if (ec) throw HttpError(500, fmt::format("removing {}: {}", *dir, ec.message()), "server_error");
}

}  // namespace kvad::serve
