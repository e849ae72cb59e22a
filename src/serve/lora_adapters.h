// The server's LoRA adapters (docs/lora.md): the ones --lora loaded with the model at start,
// listed and re-scaled as llama-server does (GET / POST /lora-adapters), and chosen per request
// by a `lora` field ([{"id": 0, "scale": 0.5}]) on the completion and chat routes. Both lists read
// the same way as llama-server's: an adapter a list leaves out runs at scale 0. The scales live
// here, not in the model: a POST changes what later requests get by default, never a running one.
#pragma once
#include <cstdint>
#include <mutex>
#include <vector>

#include "core/json.h"
#include "runtime/loader.h"

namespace kvad::serve {

struct LoraChoice {
  int64_t id = 0;
  float scale = 0;
};
// Checks a `lora` list's shape (at most 64 entries, integer ids without repeats, scales from
// -100 to 100); throws HttpError(400) naming `field`. Ids are checked against the model later.
std::vector<LoraChoice> parse_lora_list(const Json& v, const char* field);

class LoraScales {
 public:
  // [{"id", "path", "scale"}] for m's adapters.
  Json list(const LoadedModel& m);
  // POST /lora-adapters: the new default scales.
  void set(const LoadedModel& m, const std::vector<LoraChoice>& choices);
  // What a request runs with: its own list when it gave one, else the current defaults.
  std::vector<LoraUse> uses(const LoadedModel& m, const std::vector<LoraChoice>* asked);

 private:
  std::vector<float>& scales_of(const LoadedModel& m);  // mu_ held; reset when the model changed
  std::vector<float> chosen(const LoadedModel& m, const std::vector<LoraChoice>& choices) const;
  std::mutex mu_;
  const LoadedModel* model_ = nullptr;
  std::vector<float> scales_;
};

}  // namespace kvad::serve
