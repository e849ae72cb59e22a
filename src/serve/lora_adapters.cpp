#include "serve/lora_adapters.h"

#include <cmath>

#include <fmt/format.h>

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

std::vector<float>& LoraScales::scales_of(const LoadedModel& m) {
  // Another model was loaded (a new one may land at the old one's address: the count tells too):
  // its adapters at their --lora scales.
  if (model_ != &m || scales_.size() != m.loras.size()) {
    model_ = &m;
    scales_.clear();
    for (const LoadedLora& l : m.loras) scales_.push_back(l.scale);
  }
  return scales_;
}

std::vector<float> LoraScales::chosen(const LoadedModel& m, const std::vector<LoraChoice>& choices) const {
  std::vector<float> s(m.loras.size(), 0.0f);
  for (const LoraChoice& c : choices) {
    if (c.id >= (int64_t)m.loras.size())
      bad("lora", m.loras.empty() ? std::string("this server has no LoRA adapters (kvad serve --lora PATH)")
                                  : fmt::format("adapter id {} does not exist: the ids are 0 to {} (GET /lora-adapters)",
                                                c.id, m.loras.size() - 1));
    s[(size_t)c.id] = c.scale;
  }
  return s;
}

Json LoraScales::list(const LoadedModel& m) {
  std::lock_guard<std::mutex> lk(mu_);
  const std::vector<float>& s = scales_of(m);
  Json out = Json::array();
  for (size_t i = 0; i < m.loras.size(); i++) out.push_back({{"id", i}, {"path", m.loras[i].path}, {"scale", s[i]}});
  return out;
}

void LoraScales::set(const LoadedModel& m, const std::vector<LoraChoice>& choices) {
  std::vector<float> s = chosen(m, choices);
  std::lock_guard<std::mutex> lk(mu_);
  scales_of(m) = std::move(s);
}

std::vector<LoraUse> LoraScales::uses(const LoadedModel& m, const std::vector<LoraChoice>* asked) {
  if (m.loras.empty() && !asked) return {};
  std::vector<float> s;
  if (asked) {
    s = chosen(m, *asked);
  } else {
    std::lock_guard<std::mutex> lk(mu_);
    s = scales_of(m);
  }
  std::vector<LoraUse> out;
  for (size_t i = 0; i < s.size(); i++)
    if (s[i] != 0) out.push_back({m.loras[i].adapter.get(), s[i]});
  return out;
}

void add_lora_routes(Server::Impl& s) {
  s.http.Get("/lora-adapters", [&s](const httplib::Request&, httplib::Response& res) {
    guarded(res, [&] { reply_json(res, s.loras.list(*require_model(s, ""))); });
  });
  s.http.Post("/lora-adapters", [&s](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      Json body = parse_request_json(req.body);  // llama-server takes a bare list
      s.loras.set(*require_model(s, ""), parse_lora_list(body, "lora"));
      reply_json(res, {{"success", true}});
    });
  });
}

}  // namespace kvad::serve
