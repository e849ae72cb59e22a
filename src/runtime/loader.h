// Everything needed to run a model folder: the model (through the registry), its tokenizer,
// chat template and generation defaults.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"
#include "models/registry.h"
#include "runtime/lora.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace kvad {

struct LoadedModel {
  std::string path;  // the folder
  std::string key;   // ResolvedModel::key: names its caches
  std::string name;  // what the user called it
  std::string served_as;  // the id a server reports instead of the folder's name (kvad serve --alias)
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ChatTemplate> chat_template;  // null when the model has none or it did not parse
  std::string chat_template_error;               // why it did not parse (plain completion still works)
  std::vector<int32_t> eos_ids;                  // config + generation_config + tokenizer EOS
  Json generation_config = Json::object();
  double load_seconds = 0;
  LoadReport load_report;  // e.g. "quantised to q8, cached to ..." / "weights from cache ..."
  std::vector<LoadedLora> loras;  // --lora adapters, loaded for `model` (their ids are their places)
};

// What a model name refers to. In order: a folder path; a model in kvad's store; a Hub name
// ORG/NAME[@REVISION] found in the Hugging Face cache, offline (hf/hub.h). A Hub model that is not
// there (or only partly) is an error that says `kvad pull ORG/NAME`.
struct ResolvedModel {
  std::string path;  // the folder
  std::string key;   // for the last-used record: "hf:ORG/NAME", "store:NAME", or "" for a plain folder
};
ResolvedModel resolve_model(const std::string& name);
std::string resolve_model_path(const std::string& name);
LoadedModel load_model(const std::string& name, const LoadOptions& opts);
// The step every loader (folder or GGUF) ends with, once m.model and m.tokenizer are set: the
// vocabulary check, the chat template (a parse error kept for when a chat is asked for), and the
// end-of-generation ids (config + `more_eos` + the tokenizer's), sorted and unique.
void finish_loaded_model(LoadedModel& m, const std::string& template_what, const std::vector<int32_t>& more_eos);

}  // namespace kvad
