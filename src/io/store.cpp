#include "io/store.h"

#include <cstdlib>

#include "core/error.h"
#include "core/fs.h"

namespace kvad {

std::string kvad_home() {
  if (const char* h = std::getenv("KVAD_HOME"); h && *h) return h;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return join_path(x, "kvad");
  if (const char* home = std::getenv("HOME"); home && *home) return join_path(join_path(home, ".cache"), "kvad");
  fail("cannot locate kvad's folder: set KVAD_HOME (or HOME)");
}

std::string store_models_dir() { return join_path(kvad_home(), "models"); }
std::string store_cache_dir() { return join_path(kvad_home(), "cache"); }

std::string store_adapters_dir() { return join_path(kvad_home(), "adapters"); }

namespace {
// NAME's folder under `root` when it holds `marker`; never a path out of the store.
std::optional<std::string> find_under(const std::string& root, const std::string& name, const char* marker) {
  if (name.empty() || name.find("..") != std::string::npos || name[0] == '/') return std::nullopt;
  std::string dir = join_path(root, name);
  if (file_exists(join_path(dir, marker))) return dir;
  return std::nullopt;
}
}  // namespace

std::optional<std::string> find_in_store(const std::string& name) {
  return find_under(store_models_dir(), name, "config.json");
}

std::optional<std::string> find_pipeline_in_store(const std::string& name) {
  return find_under(store_models_dir(), name, "model_index.json");
}

std::optional<std::string> find_adapter_in_store(const std::string& name) {
  return find_under(store_adapters_dir(), name, "adapter_config.json");
}

}  // namespace kvad
