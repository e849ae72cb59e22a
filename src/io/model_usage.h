// When each model was last loaded, for `kvad ls`: $KVAD_HOME/last_used.json, {"<key>": unix seconds}.
// Keys: "hf:ORG/NAME" for models in the Hugging Face cache, "store:NAME" for kvad's store.
// Recording is best effort (a read-only home must not stop a model from running).
#pragma once
#include <cstdint>
#include <map>
#include <string>

namespace kvad {

std::string model_usage_path();
void record_model_use(const std::string& key);
std::map<std::string, int64_t> read_model_use();
void forget_model_use(const std::string& key);

}  // namespace kvad
