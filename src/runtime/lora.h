// Adapters as the commands hold them: loaded once for the model (models/lora.h), each with the
// scale it runs at unless a request says otherwise (`--lora PATH[:SCALE]`, re-scaled by the
// server's POST /lora-adapters). Sequences carry LoraUse lists (backend/lora.h) built from these.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/lora.h"
#include "models/model.h"

namespace kvad {

struct LoadedLora {
  std::shared_ptr<const LoraAdapter> adapter;
  std::string path;
  float scale = 1;
};

struct LoraSpec {
  std::string path;
  float scale = 1;
};
// "PATH" or "PATH:SCALE" (the text after the last ':' when it is a number; a path may hold ':').
LoraSpec parse_lora_spec(const std::string& text);
inline constexpr size_t kMaxLoras = 64;
// Loads every --lora for `model`, in order (their ids are their places); at most kMaxLoras.
std::vector<LoadedLora> load_loras(const std::vector<std::string>& specs, const Model& model);
// The adapters at their current scales (those at 0 left out: they add nothing).
std::vector<LoraUse> lora_uses(const std::vector<LoadedLora>& loras);
// Keys and values computed with adapters differ from the base's: prefix blocks are shared only
// among sequences whose adapters and scales match. 0 for none, so base sequences still share.
uint64_t lora_salt(std::span<const LoraUse> uses);

}  // namespace kvad
