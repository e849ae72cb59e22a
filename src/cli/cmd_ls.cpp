// kvad ls: every model kvad can find, in the Hugging Face cache and in kvad's store: name,
// architecture (as the registry sees it; an image model's kind: SD 1.5 / SDXL pipeline or single file), parameters and dtype (from the safetensors headers, no
// weights read), size of the weights (not the optimizer state a trained model keeps beside them), last used.
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <set>

#include "cli/common.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include "core/text.h"
#include "io/gguf.h"
#include "io/hub.h"
#include "io/model_usage.h"
#include "io/safetensors.h"
#include "io/store.h"
#include "image/model_info.h"
#include "models/registry.h"
#include "runtime/model_info.h"

namespace fs = std::filesystem;

namespace kvad::cli {

namespace {

struct Row {
  std::string name, arch, params = "-", format = "-", source, path, kind = "text";
  uint64_t bytes = 0;
  int64_t parameters = 0;
  int64_t last_used = 0;  // unix seconds, 0 = never (since kvad started recording)
};

bool is_gguf(const std::string& p) { return p.size() > 5 && ends_with_ignoring_case(p, ".gguf"); }

std::string fmt_when(int64_t t) {
  if (t <= 0) return "never";
  int64_t d = (int64_t)std::time(nullptr) - t;
  if (d < 60) return "just now";
  if (d < 3600) return fmt::format("{} min ago", d / 60);
  if (d < 86400) return fmt::format("{} h ago", d / 3600);
  if (d < 30 * 86400) return fmt::format("{} days ago", d / 86400);
  char buf[32];
  std::time_t tt = (std::time_t)t;
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::localtime(&tt));
  return buf;
}

// Architecture, parameters and dtype of a model folder, without reading weights (runtime/model_info.h).
void describe_model(const std::string& dir, Row& row) {
  ModelFolderInfo info = describe_model_folder(dir);
  row.parameters = info.parameters;
  if (info.weight_bytes > 0) row.bytes = info.weight_bytes;  // the model, as the Models page counts it
  if (info.problem.rfind("unsupported", 0) == 0 || info.problem == "invalid config" || info.problem == "unreadable config.json") {
    row.arch = info.problem;
    return;
  }
  row.arch = info.architecture;
  if (!info.problem.empty() && info.problem != "no tokenizer.json") {
    row.format = info.problem;
    return;
  }
  row.params = format_parameters(row.parameters);
  row.format = "safetensors " + info.dtype;
}

// An image model's row: its kind in the ARCH column, "(image)" after it.
void describe_image(const image::ImageModelInfo& info, Row& row) {
  row.kind = "image";
  row.arch = info.kind + " (image)";
  row.parameters = info.parameters;
  if (info.weight_bytes > 0) row.bytes = info.weight_bytes;
  if (!info.problem.empty()) {
    row.format = info.problem.substr(0, 60);
    return;
  }
  row.params = format_parameters(info.parameters);
  row.format = "safetensors " + info.dtype;
}

bool is_safetensors(const std::string& p) { return p.size() > 12 && ends_with_ignoring_case(p, ".safetensors"); }

uint64_t du(const std::string& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) total += (uint64_t)st.st_blocks * 512;
  }
  return total;
}

std::vector<Row> hub_rows(const std::map<std::string, int64_t>& usage) {
  std::vector<Row> rows;
  std::string cache = hf::hub_cache_dir();
  for (const hf::CachedRepo& repo : hf::scan_cache(cache)) {
    auto used = usage.find("hf:" + repo.repo_id);
    for (const hf::CachedSnapshot& s : repo.snapshots) {
      bool main = std::find(s.refs.begin(), s.refs.end(), "main") != s.refs.end();
      std::string label = main ? repo.repo_id
                          : !s.refs.empty() ? repo.repo_id + "@" + s.refs[0]
                                            : repo.repo_id + "@" + s.commit.substr(0, 12);
      std::string dir = join_path(join_path(repo.dir, "snapshots"), s.commit);
      uint64_t model_bytes = 0;
      std::set<std::string> seen;
      bool has_config = false, has_model_index = false;
      for (const hf::CachedFile& f : s.files) {
        if (f.path == "config.json" && f.present) has_config = true;
        if (f.path == "model_index.json" && f.present) has_model_index = true;
        if (!f.present || is_gguf(f.path)) continue;
        if (f.etag.empty() || seen.insert(f.etag).second) model_bytes += f.size;
      }
      // A Stable Diffusion repo: the diffusers pipeline, and single files at its top (ORG/NAME:FILE).
      if (!has_config) {
        for (const hf::CachedFile& f : s.files) {
          if (!f.present || !is_safetensors(f.path) || f.path.find('/') != std::string::npos) continue;
          image::ImageModelInfo info = image::describe_single_file(join_path(dir, f.path));
          if (info.kind.empty()) continue;
          Row r;
          r.name = label + ":" + f.path;
          r.source = "hf";
          r.path = join_path(dir, f.path);
          describe_image(info, r);
          rows.push_back(r);
        }
      }
      if (has_model_index && !has_config) {
        Row r;
        r.name = label;
        r.source = "hf";
        r.path = dir;
        describe_image(image::describe_pipeline_folder(dir), r);
        if (main && used != usage.end()) r.last_used = used->second;
        rows.push_back(r);
      } else if (has_config || !std::any_of(s.files.begin(), s.files.end(), [](auto& f) { return is_gguf(f.path); })) {
        Row r;
        r.name = label;
        r.source = "hf";
        r.path = dir;
        r.bytes = model_bytes;
        if (has_config) describe_model(dir, r);
        else r.arch = "no config.json";
        if (main && used != usage.end()) r.last_used = used->second;
        rows.push_back(r);
      }
      for (const hf::CachedFile& f : s.files) {
        if (!f.present || !is_gguf(f.path)) continue;
        Row r;
        r.name = label + ":" + f.path;
        r.source = "hf";
        r.path = join_path(dir, f.path);
        r.bytes = f.size;
        try {  // the header only: metadata and tensor table, through the mapping
          GgufFile g(r.path);
          r.arch = g.get_string("general.architecture").value_or("?") + " (gguf)";
        } catch (const Error&) {
          r.arch = "gguf (unreadable)";
        }
        r.format = "gguf";
        rows.push_back(r);
      }
    }
  }
  return rows;
}

std::vector<Row> store_rows(const std::map<std::string, int64_t>& usage) {
  std::vector<Row> rows;
  std::string root = store_models_dir();
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (!it->is_directory(ec)) continue;
    const bool pipeline = image::is_pipeline_folder(it->path().string());
    if (!pipeline && !file_exists(join_path(it->path().string(), "config.json"))) {
      if (it.depth() >= 1) it.disable_recursion_pending();  // names are NAME or ORG/NAME
      continue;
    }
    it.disable_recursion_pending();
    Row r;
    r.name = it->path().lexically_relative(root).generic_string();
    r.source = "store";
    r.path = it->path().string();
    r.bytes = du(r.path);
    if (pipeline) describe_image(image::describe_pipeline_folder(r.path), r);
    else describe_model(r.path, r);
    if (auto u = usage.find("store:" + r.name); u != usage.end()) r.last_used = u->second;
    rows.push_back(r);
  }
  return rows;
}

}  // namespace

void add_ls(CLI::App& app) {
  auto* cmd = app.add_subcommand("ls", "list the models kvad can run (Hugging Face cache and kvad's store)");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "one JSON object per model (name, kind: text or image, arch, parameters, format, bytes, last_used, path)");
  cmd->callback([json] {
    auto usage = read_model_use();
    std::vector<Row> rows = hub_rows(usage);
    for (Row& r : store_rows(usage)) rows.push_back(std::move(r));
    std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.name < b.name; });
    if (*json) {
      for (const Row& r : rows) {
        Json j = {{"name", r.name},     {"source", r.source},       {"kind", r.kind},  {"arch", r.arch},
                  {"parameters", r.parameters}, {"format", r.format}, {"bytes", r.bytes},
                  {"last_used", r.last_used},   {"path", r.path}};
        std::printf("%s\n", j.dump().c_str());
      }
      return;
    }
    if (rows.empty()) {
      std::fprintf(stderr, "no models in the Hugging Face cache (%s) or kvad's store (%s); get one with kvad pull ORG/NAME\n",
                   hf::hub_cache_dir().c_str(), store_models_dir().c_str());
      return;
    }
    std::vector<std::array<std::string, 6>> cells = {{"NAME", "ARCH", "PARAMS", "FORMAT", "SIZE", "LAST USED"}};
    for (const Row& r : rows)
      cells.push_back({r.name, r.arch, r.params, r.format, format_bytes(r.bytes),
                       r.format == "gguf" ? "-" : fmt_when(r.last_used)});
    std::array<size_t, 6> w{};
    for (auto& c : cells)
      for (size_t i = 0; i < 6; i++) w[i] = std::max(w[i], c[i].size());
    for (auto& c : cells) {
      std::string line;
      for (size_t i = 0; i < 6; i++) {
        std::string cell = c[i];
        if (i < 5) cell.resize(w[i] + 2, ' ');
        line += cell;
      }
      std::printf("%s\n", line.c_str());
    }
  });
}

}  // namespace kvad::cli
