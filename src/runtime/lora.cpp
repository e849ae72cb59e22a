#include "runtime/lora.h"

#include <bit>
#include <cmath>
#include <cstdlib>

#include "core/error.h"
#include "core/fs.h"
#include "io/store.h"
#include "models/lora.h"

namespace kvad {

LoraSpec parse_lora_spec(const std::string& text) {
  LoraSpec s{text, 1};
  size_t colon = text.rfind(':');
  if (colon != std::string::npos && colon + 1 < text.size()) {
    const char* start = text.c_str() + colon + 1;
    char* end = nullptr;
    double v = std::strtod(start, &end);
    if (end && *end == '\0' && end != start) {
      if (!std::isfinite(v) || std::fabs(v) > 100) fail("--lora {}: the scale {} must be a number from -100 to 100", text, v);
      s.path = text.substr(0, colon);
      s.scale = (float)v;
    }
  }
  if (s.path.empty()) fail("--lora '{}': no adapter path", text);
  return s;
}

std::vector<LoadedLora> load_loras(const std::vector<std::string>& specs, const Model& model) {
  // The server's lora lists name adapters by id, at most 64 of them (serve/lora_adapters.h).
  if (specs.size() > kMaxLoras) fail("{} --lora adapters: at most {}", specs.size(), kMaxLoras);
  std::vector<LoadedLora> out;
  for (const std::string& text : specs) {
    LoraSpec s = parse_lora_spec(text);
    // A name with no such file is looked up among the adapters kvad train --lora saved.
    std::string path = s.path;
    if (!file_exists(path) && !is_directory(path))
      if (std::optional<std::string> stored = find_adapter_in_store(path)) path = *stored;
    out.push_back({load_lora(path, model), s.path, s.scale});
  }
  return out;
}

std::vector<LoraUse> lora_uses(const std::vector<LoadedLora>& loras) {
  std::vector<LoraUse> uses;
  for (const LoadedLora& l : loras)
    if (l.scale != 0) uses.push_back({l.adapter.get(), l.scale});
  return uses;
}

uint64_t lora_salt(std::span<const LoraUse> uses) {
  uint64_t h = 0;
  for (const LoraUse& u : uses) {  // FNV-style mixing of each adapter's address and scale bits
    h = (h ^ (uint64_t)(uintptr_t)u.adapter) * 0x100000001b3ull;
    h = (h ^ std::bit_cast<uint32_t>(u.scale)) * 0x100000001b3ull;
  }
  return h;
}

}  // namespace kvad
