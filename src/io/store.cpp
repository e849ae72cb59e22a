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

std::optional<std::string> find_in_store(const std::string& name) {
  if (name.empty() || name.find("..") != std::string::npos || name[0] == '/') return std::nullopt;
  std::string dir = join_path(store_models_dir(), name);
  if (file_exists(join_path(dir, "config.json"))) return dir;
  return std::nullopt;
}

}  // namespace kvad
