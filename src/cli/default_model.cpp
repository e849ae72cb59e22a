// The model `kvad run` and `kvad chat` use without --model: kvad's own character-level model of
// the King James Bible, shipped in the source tree (models/kvad-kjv, trained by `kvad train`; see
// docs/training.md). KVAD_DEFAULT_MODEL names another one (a folder or a store name).
#include <cstdlib>

#include "cli/common.h"
#include "core/error.h"
#include "core/fs.h"

namespace kvad::cli {

std::string shipped_models_dir() { return join_path(KVAD_SOURCE_DIR, "models"); }

std::string default_model() {
  if (const char* env = std::getenv("KVAD_DEFAULT_MODEL"); env && *env) return env;
  std::string shipped = join_path(shipped_models_dir(), "kvad-kjv");
  if (!is_directory(shipped))
    fail("no --model given, and the default model is not at {} (set KVAD_DEFAULT_MODEL or give --model)", shipped);
  return shipped;
}

}  // namespace kvad::cli
