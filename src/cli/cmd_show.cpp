// kvad show MODEL: what a model is without loading its weights: architecture and shape,
// parameters, context, format, chat template, its files and where it lives (as `ollama show`).
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "cli/common.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include "io/download.h"
#include "io/gguf.h"
#include "models/gguf_model.h"
#include "runtime/loader.h"
#include "runtime/model_info.h"

namespace fs = std::filesystem;

namespace kvad::cli {

namespace {

struct Shown {
  OrderedJson facts = OrderedJson::object();  // in display order
  std::string chat_template;
};

// The first of `keys` config.json has as an integer (families name the same thing differently).
std::optional<int64_t> config_int(const Json& c, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (c.contains(k) && c[k].is_number_integer()) return c[k].get<int64_t>();
  return std::nullopt;
}

void add_shape(Shown& s, const Json& c) {
  auto put = [&](const char* name, std::initializer_list<const char*> keys) {
    if (auto v = config_int(c, keys)) s.facts[name] = *v;
  };
  put("layers", {"num_hidden_layers", "n_layer"});
  put("hidden", {"hidden_size", "n_embd"});
  put("heads", {"num_attention_heads", "n_head"});
  put("kv_heads", {"num_key_value_heads"});
  put("vocabulary", {"vocab_size"});
}

void add_files(Shown& s, const std::string& dir) {
  OrderedJson files = OrderedJson::array();
  uint64_t total = 0;
  std::vector<std::pair<std::string, uint64_t>> list;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    uint64_t size = e.is_regular_file(ec) ? (uint64_t)e.file_size(ec) : 0;
    list.push_back({name + (e.is_directory(ec) ? "/" : ""), size});
  }
  std::sort(list.begin(), list.end());
  for (auto& [name, size] : list) {
    files.push_back({{"name", name}, {"bytes", size}});
    total += size;
  }
  s.facts["files"] = files;
  s.facts["bytes_on_disk"] = total;
}

Shown show_folder(const std::string& dir) {
  Shown s;
  ModelFolderInfo info = describe_model_folder(dir);
  Json config = read_json_file(join_path(dir, "config.json"));
  std::string type = config.value("model_type", "");
  s.facts["architecture"] = info.architecture + (type.empty() ? "" : " (" + type + ")");
  if (!info.problem.empty()) s.facts["problem"] = info.problem;
  s.facts["runs"] = info.supported && info.problem.empty();
  s.facts["parameters"] = info.parameters;
  s.facts["context"] = info.context_length;
  add_shape(s, config);
  s.facts["format"] = "safetensors " + (info.dtypes.empty() ? std::string("?") : info.dtypes);
  std::string tc = join_path(dir, "tokenizer_config.json");
  if (file_exists(tc)) {
    Json t = read_json_file(tc);
    if (t.contains("chat_template") && t["chat_template"].is_string()) s.chat_template = t["chat_template"];
    if (t.contains("chat_template") && t["chat_template"].is_array())  // named templates: the default one
      for (const Json& e : t["chat_template"])
        if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string())
          s.chat_template = e["template"];
  }
  if (s.chat_template.empty() && file_exists(join_path(dir, "chat_template.jinja"))) s.chat_template = read_file(join_path(dir, "chat_template.jinja"));
  add_files(s, dir);
  return s;
}

Shown show_gguf(const std::string& path) {
  Shown s;
  GgufCheckpoint ck(std::make_shared<GgufFile>(path));
  const GgufFile& g = ck.file();
  Json config = Json::object();
  try {
    config = gguf_model_config(g);
  } catch (const Error& e) {
    s.facts["problem"] = e.what();
  }
  s.facts["architecture"] = ck.architecture() + " (gguf)";
  s.facts["runs"] = !s.facts.contains("problem");
  int64_t params = 0;
  std::map<std::string, int64_t> by_type;
  for (const GgufTensorInfo& t : g.tensors()) {
    int64_t n = 1;
    for (int64_t d : t.ne) n *= d;
    params += n;
    by_type[ggml_type_name(t.ggml_type)] += n;
  }
  s.facts["parameters"] = params;
  if (auto c = config_int(config, {"max_position_embeddings", "n_positions"})) s.facts["context"] = *c;
  add_shape(s, config);
  std::vector<std::pair<int64_t, std::string>> types;
  for (auto& [name, n] : by_type) types.push_back({n, name});
  std::sort(types.rbegin(), types.rend());
  std::string fmt_types;
  for (auto& [n, name] : types) fmt_types += (fmt_types.empty() ? "" : "+") + name;
  s.facts["format"] = "gguf v" + std::to_string(g.version()) + " " + fmt_types;
  s.chat_template = g.get_string("tokenizer.chat_template").value_or("");
  std::error_code ec;
  s.facts["files"] = OrderedJson::array({{{"name", fs::path(path).filename().string()}, {"bytes", (uint64_t)fs::file_size(path, ec)}}});
  s.facts["bytes_on_disk"] = (uint64_t)fs::file_size(path, ec);
  return s;
}

std::string where_from(const ResolvedModel& r) {
  if (r.key.rfind("hf:", 0) == 0) return "the Hugging Face cache (" + r.key.substr(3) + ")";
  if (r.key.rfind("store:", 0) == 0) return "kvad's store";
  std::error_code ec;
  std::string shipped = fs::weakly_canonical(shipped_models_dir(), ec).string();
  std::string here = fs::weakly_canonical(r.path, ec).string();
  if (!shipped.empty() && here.rfind(shipped + "/", 0) == 0) return "shipped with kvad";
  return "a folder";
}

void print_human(const std::string& name, const Shown& s) {
  const OrderedJson& f = s.facts;
  std::printf("%s\n", name.c_str());
  auto row = [](const char* key, const std::string& value) { std::printf("  %-14s %s\n", key, value.c_str()); };
  row("architecture", f["architecture"].get<std::string>());
  if (f.contains("problem")) row("cannot run", f["problem"].get<std::string>());
  row("parameters", format_parameters(f["parameters"].get<int64_t>()));
  if (f.contains("context")) row("context", std::to_string(f["context"].get<int64_t>()) + " tokens");
  std::string shape;
  for (const char* k : {"layers", "hidden", "heads", "kv_heads", "vocabulary"})
    if (f.contains(k)) shape += fmt::format("{}{} {}", shape.empty() ? "" : ", ", f[k].get<int64_t>(), k);
  if (!shape.empty()) row("shape", shape);
  row("format", f["format"].get<std::string>());
  row("chat template", s.chat_template.empty() ? "none (plain completion only)"
                                               : fmt::format("yes, {} characters (kvad show --template prints it)", s.chat_template.size()));
  row("source", f["source"].get<std::string>());
  row("path", f["path"].get<std::string>());
  std::string files;
  for (const OrderedJson& e : f["files"])
    files += fmt::format("\n    {:<32} {:>10}", e["name"].get<std::string>(), format_bytes(e["bytes"].get<uint64_t>()));
  std::printf("  %-14s %s total%s\n", "files", format_bytes(f["bytes_on_disk"].get<uint64_t>()).c_str(), files.c_str());
}

}  // namespace

void add_show(CLI::App& app) {
  auto* cmd = app.add_subcommand("show", "what a model is, without loading it: architecture, parameters, context, "
                                 "format, chat template, files, where it lives");
  struct Args {
    std::string model;
    bool json = false, template_only = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("model", a->model, "a folder, .gguf, store name or Hub ORG/NAME (default: the default model)");
  cmd->add_flag("--json", a->json, "everything as one JSON object (the chat template included)");
  cmd->add_flag("--template", a->template_only, "print only the chat template");
  cmd->callback([a] {
    std::string name = a->model;
    if (a->model.empty()) a->model = default_model(), name = fs::path(a->model).filename().string() + " (the default model)";
    ResolvedModel r = resolve_model(a->model);
    Shown s = is_gguf_path(r.path) ? show_gguf(r.path) : show_folder(r.path);
    s.facts["source"] = where_from(r);
    s.facts["path"] = r.path;
    if (a->template_only) {
      if (s.chat_template.empty()) fail("{}: the model has no chat template", a->model);
      std::printf("%s\n", s.chat_template.c_str());
      return;
    }
    if (a->json) {
      OrderedJson j = {{"name", a->model}};
      j.update(s.facts);
      j["chat_template"] = s.chat_template.empty() ? OrderedJson(nullptr) : OrderedJson(s.chat_template);
      std::printf("%s\n", j.dump(2, ' ', false, OrderedJson::error_handler_t::replace).c_str());
      return;
    }
    print_human(name, s);
  });
}

}  // namespace kvad::cli
