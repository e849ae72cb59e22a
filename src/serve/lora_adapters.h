// The server's LoRA adapters (docs/lora.md): the ones --lora loaded with the model at start,
// listed and re-scaled as llama-server does (GET / POST /lora-adapters), and chosen per request
// by a `lora` field ([{"id": 0, "scale": 0.5}]) on the completion and chat routes. Both lists read
// the same way as llama-server's: an adapter a list leaves out runs at scale 0. The scales live
// here, not in the model: a POST changes what later requests get by default, never a running one.
// The list can grow while the model serves: an adapter a Training page job made for it
// (serve/train_jobs.h) is added after the --lora ones, at scale 0 (a request or the chat's picker
// turns it on), and a model loaded from the Models page comes with the store's adapters for it.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
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

// The adapters of each loaded model (its --lora ones, then those added while it serves) and their
// current scales. Kept per model until the model is freed: a request holds its model, so the
// adapters its sequences point to live as long as they run, whatever is loaded meanwhile.
class LoraScales {
 public:
  using ModelPtr = std::shared_ptr<const LoadedModel>;
  // [{"id", "path", "scale"}] for m's adapters.
  Json list(const ModelPtr& m);
  // POST /lora-adapters: the new default scales.
  void set(const ModelPtr& m, const std::vector<LoraChoice>& choices);
  // What a request runs with: its own list when it gave one, else the current defaults.
  std::vector<LoraUse> uses(const ModelPtr& m, const std::vector<LoraChoice>* asked);
  // Adds an adapter loaded for m (at l.scale); returns its id. One from a folder m already has an
  // adapter from (a retrained adapter saved over the old) takes that adapter's place: same id,
  // same scale. Throws HttpError(409) past kMaxLoras.
  int64_t add(const ModelPtr& m, LoadedLora l);

 private:
  struct PerModel {
    std::weak_ptr<const LoadedModel> model;
    std::vector<LoadedLora> adapters;
    std::vector<float> scales;
    // Adapters replaced by a retrained one, kept while the model is: sequences still running hold
    // their address, and prefix blocks are salted by it (runtime/lora.h), so it must not be reused.
    std::vector<std::shared_ptr<const LoraAdapter>> replaced;
  };
  PerModel& of(const ModelPtr& m);  // mu_ held; drops the entries of freed models
  static std::vector<float> chosen(const PerModel& p, const std::vector<LoraChoice>& choices);
  std::mutex mu_;
  std::vector<PerModel> models_;
};

// The store's adapters (kvad train --lora, $KVAD_HOME/adapters) made for the model in `dir`:
// their adapter_config.json's base_model_name_or_path names that folder (a path, a store or a Hub
// name). Their folders, sorted by name.
std::vector<std::string> store_adapters_for(const std::string& dir);
// Each of those loaded for m at scale 0, but for those m already runs (its --lora ones); one that
// does not load is left out with a warning.
std::vector<LoadedLora> load_store_adapters(const LoadedModel& m);
// The store's adapters for the Training page: [{name, path, base, rank, alpha, step, val_bpc,
// base_val_bpc}] from adapter_config.json and trainer_state.json's "trained" section.
Json list_store_adapters();
// Whether two model folders are the same folder.
bool same_folder(const std::string& a, const std::string& b);

}  // namespace kvad::serve
