// The model `kvad run` and `kvad chat` use without --model: kvad's own character-level model of
// the King James Bible (models/kvad-kjv, trained by `kvad train`; see docs/training.md). An
// installed kvad (cmake --install) finds it beside its binary, in PREFIX/share/kvad/models; a
// binary from the build tree, or one copied elsewhere, in the source tree it was built from.
// KVAD_DEFAULT_MODEL names another one (a folder or a store name).
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "cli/common.h"
#include "core/error.h"
#include "core/fs.h"

namespace kvad::cli {

std::string shipped_models_dir() {
  static const std::string dir = [] {
    std::error_code ec;
    std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) {
      std::filesystem::path installed = exe.parent_path() / KVAD_INSTALL_DATA_REL / "models";
      if (std::filesystem::is_directory(installed / "kvad-kjv", ec)) return installed.lexically_normal().string();
    }
    return join_path(KVAD_SOURCE_DIR, "models");
  }();
  return dir;
}

std::string default_model() {
  if (const char* env = std::getenv("KVAD_DEFAULT_MODEL"); env && *env) return env;
  std::string shipped = join_path(shipped_models_dir(), "kvad-kjv");
  if (!is_directory(shipped))
    fail("no --model given, and the default model is not at {}: install kvad with `cmake --install build` (it puts the "
         "model beside the binary), set KVAD_DEFAULT_MODEL, or give a model",
         shipped);
  return shipped;
}

}  // namespace kvad::cli
