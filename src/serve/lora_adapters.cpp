#include "serve/lora_adapters.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include <fmt/format.h>

#include "core/fs.h"
#include "io/store.h"
#include "models/lora.h"
#include "serve/fn_job.h"
#include "serve/request_fields.h"
#include "serve/server_impl.h"

namespace kvad::serve {

namespace {
constexpr size_t kMaxLoraEntries = kMaxLoras;  // a list names each loaded adapter at most once
}

std::vector<LoraChoice> parse_lora_list(const Json& v, const char* field) {
  const std::string f = field;
  if (!v.is_array()) bad(f, fmt::format("'{}' must be a list of {{\"id\": N, \"scale\": S}}", f));
  if (v.size() > kMaxLoraEntries) bad(f, fmt::format("'{}' holds {} entries; at most {}", f, v.size(), kMaxLoraEntries));
  std::vector<LoraChoice> out;
  for (const Json& e : v) {
    if (!e.is_object() || !has(e, "id")) bad(f, fmt::format("each entry of '{}' must be an object with an 'id'", f));
    LoraChoice c;
    c.id = get_int(e, "id", 0, (int64_t)kMaxLoraEntries - 1, f + ".");
    c.scale = has(e, "scale") ? (float)get_number(e, "scale", -100, 100, f + ".") : 1.0f;
    for (const LoraChoice& o : out)
      if (o.id == c.id) bad(f, fmt::format("'{}' names adapter {} twice", f, c.id));
    out.push_back(c);
  }
  return out;
}

LoraScales::PerModel& LoraScales::of(const ModelPtr& m) {
  std::erase_if(models_, [](const PerModel& p) { return p.model.expired(); });
  for (PerModel& p : models_)
    if (!p.model.owner_before(m) && !m.owner_before(p.model)) return p;
  PerModel p;  // a model seen for the first time: its --lora adapters at their --lora scales
  p.model = m;
  p.adapters = m->loras;
  for (const LoadedLora& l : m->loras) p.scales.push_back(l.scale);
  models_.push_back(std::move(p));
  return models_.back();
}

std::vector<float> LoraScales::chosen(const PerModel& p, const std::vector<LoraChoice>& choices) {
  const size_t n = p.adapters.size();
  std::vector<float> s(n, 0.0f);
  for (const LoraChoice& c : choices) {
    if (c.id >= (int64_t)n)
      bad("lora", n == 0 ? std::string("this server has no LoRA adapters (kvad serve --lora PATH)")
                         : fmt::format("adapter id {} does not exist: the ids are 0 to {} (GET /lora-adapters)", c.id,
                                       n - 1));
    s[(size_t)c.id] = c.scale;
  }
  return s;
}

Json LoraScales::list(const ModelPtr& m) {
  std::lock_guard<std::mutex> lk(mu_);
  const PerModel& p = of(m);
  Json out = Json::array();
  for (size_t i = 0; i < p.adapters.size(); i++)
    out.push_back({{"id", i}, {"path", p.adapters[i].path}, {"scale", p.scales[i]}});
  return out;
}

void LoraScales::set(const ModelPtr& m, const std::vector<LoraChoice>& choices) {
  std::lock_guard<std::mutex> lk(mu_);
  PerModel& p = of(m);
  p.scales = chosen(p, choices);
}

std::vector<LoraUse> LoraScales::uses(const ModelPtr& m, const std::vector<LoraChoice>* asked) {
  std::lock_guard<std::mutex> lk(mu_);
  PerModel& p = of(m);
  if (p.adapters.empty() && !asked) return {};
  std::vector<float> s = asked ? chosen(p, *asked) : p.scales;
  std::vector<LoraUse> out;
  for (size_t i = 0; i < s.size(); i++)
    if (s[i] != 0) out.push_back({p.adapters[i].adapter.get(), s[i]});
  return out;
}

int64_t LoraScales::add(const ModelPtr& m, LoadedLora l) {
  std::lock_guard<std::mutex> lk(mu_);
  PerModel& p = of(m);
  for (size_t i = 0; i < p.adapters.size(); i++)
    if (same_folder(p.adapters[i].path, l.path)) {
      p.replaced.push_back(std::move(p.adapters[i].adapter));
      p.adapters[i] = std::move(l);
      return (int64_t)i;
    }
  if (p.adapters.size() >= kMaxLoras)
    throw HttpError(409, fmt::format("the model already has {} LoRA adapters, the most a server holds", kMaxLoras),
                    "invalid_request_error");
  p.scales.push_back(l.scale);
  p.adapters.push_back(std::move(l));
  return (int64_t)p.adapters.size() - 1;
}

bool same_folder(const std::string& a, const std::string& b) {
  std::error_code ec;
  return a == b || std::filesystem::equivalent(a, b, ec);
}

namespace {

// adapter_config.json and trainer_state.json of a store adapter (null where missing or unreadable).
Json read_json_or_null(const std::string& path) {
  try {
    return file_exists(path) ? read_json_file(path) : Json(nullptr);
  } catch (const Error&) {
    return nullptr;
  }
}

// The store's adapter folders, sorted by name (none when there is no store).
std::vector<std::filesystem::path> store_adapter_dirs() {
  std::vector<std::filesystem::path> out;
  std::error_code ec;
  try {
    for (const auto& d : std::filesystem::directory_iterator(store_adapters_dir(), ec))
      if (d.is_directory(ec) && file_exists(join_path(d.path().string(), "adapter_config.json"))) out.push_back(d.path());
  } catch (const Error&) {  // no HOME: no store
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string base_of(const Json& config) {
  return config.is_object() && config.value("base_model_name_or_path", Json(nullptr)).is_string()
             ? config["base_model_name_or_path"].get<std::string>()
             : "";
}

}  // namespace

std::vector<std::string> store_adapters_for(const std::string& dir) {
  std::vector<std::string> out;
  for (const std::filesystem::path& p : store_adapter_dirs()) {
    std::string base = base_of(read_json_or_null(join_path(p.string(), "adapter_config.json")));
    if (base.empty()) continue;
    try {
      if (same_folder(resolve_model_path(base), dir)) out.push_back(p.string());
    } catch (const Error&) {  // a base that is not here (a Hub model not pulled): not this one
    }
  }
  return out;
}

std::vector<LoadedLora> load_store_adapters(const LoadedModel& m) {
  std::vector<LoadedLora> out;
  for (const std::string& dir : store_adapters_for(m.path)) {
    if (out.size() + m.loras.size() >= kMaxLoras) break;
    if (std::any_of(m.loras.begin(), m.loras.end(), [&](const LoadedLora& l) { return same_folder(l.path, dir); })) continue;
    try {
      out.push_back({load_lora(dir, *m.model), dir, 0.0f});
    } catch (const Error& e) {
      std::fprintf(stderr, "kvad: warning: the store's adapter %s is left out: %s\n", dir.c_str(), e.what());
    }
  }
  return out;
}

Json list_store_adapters() {
  Json out = Json::array();
  for (const std::filesystem::path& p : store_adapter_dirs()) {
    Json config = read_json_or_null(join_path(p.string(), "adapter_config.json"));
    Json state = read_json_or_null(join_path(p.string(), "trainer_state.json"));
    Json trained = state.is_object() && state.contains("trained") ? state["trained"] : Json::object();
    auto num = [](const Json& j, const char* k) { return j.is_object() && j.contains(k) && j[k].is_number() ? j[k] : Json(nullptr); };
    out.push_back({{"name", p.filename().string()},
                   {"path", p.string()},
                   {"base", base_of(config)},
                   {"rank", num(config, "r")},
                   {"alpha", num(config, "lora_alpha")},
                   {"step", num(trained, "step")},
                   {"val_bpc", num(trained, "val_bpc")},
                   {"base_val_bpc", num(trained, "base_val_bpc")}});
  }
  return out;
}

Json attach_trained_adapter(Server::Impl& s, const std::string& name, const std::string& dir, const std::string& base,
                            const std::string& base_path) {
  const std::string how = fmt::format("kvad serve --model {} --lora {}", base, name);
  auto m = s.sched.model();
  if (!m || !same_folder(m->path, base_path))
    return {{"loaded", false},
            {"message", fmt::format("{} is saved in the store but not loaded: {} is loaded now, not {}. Load {} on the "
                                    "Models page (it comes with its adapters), or run: {}",
                                    name, m ? model_id(*m) : std::string("no model"), base, base, how)}};
  auto job = std::make_shared<FnJob>("loading a LoRA adapter", [&s, m, dir](ModelHost& host) -> Json {
    if (host.model() != m) throw HttpError(409, "another model was loaded meanwhile", "invalid_request_error");
    int64_t id = s.loras.add(m, {load_lora(dir, *m->model), dir, 0.0f});
    return {{"id", id}};
  });
  try {
    Json r = run_and_wait(s, job);
    return {{"loaded", true}, {"id", r["id"]}, {"message", fmt::format("{} is adapter {} of {}: pick it in the chat", name,
                                                                        r["id"].get<int64_t>(), model_id(*m))}};
  } catch (const std::exception& e) {
    return {{"loaded", false}, {"message", fmt::format("{} is saved in the store, but loading it failed ({}); run: {}",
                                                       name, e.what(), how)}};
  }
}

void add_lora_routes(Server::Impl& s) {
  s.http.Get("/lora-adapters", [&s](const httplib::Request&, httplib::Response& res) {
    guarded(res, [&] { reply_json(res, s.loras.list(require_model(s, ""))); });
  });
  s.http.Post("/lora-adapters", [&s](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      Json body = parse_request_json(req.body);  // llama-server takes a bare list
      s.loras.set(require_model(s, ""), parse_lora_list(body, "lora"));
      reply_json(res, {{"success", true}});
    });
  });
}

}  // namespace kvad::serve
