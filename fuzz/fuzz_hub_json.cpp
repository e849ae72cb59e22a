// libFuzzer: what a Hub (or anything HF_ENDPOINT points at) answers is untrusted. The model listing,
// a safetensors index and a user's model name must parse or fail with kvad::Error, never crash, and
// every path they yield must stay inside the cache (relative, no '.' or '..' parts).
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "io/hub.h"

static void check_path(const std::string& p) {
  std::string w = "/" + p + "/";
  if (p.empty() || p[0] == '/' || w.find("/../") != std::string::npos || w.find("/./") != std::string::npos ||
      w.find("//") != std::string::npos || p.find('\\') != std::string::npos)
    __builtin_trap();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string s(reinterpret_cast<const char*>(data), size);
  try {
    kvad::hf::RepoInfo info = kvad::hf::parse_repo_info(s, "fuzz");
    for (const auto& f : info.files) check_path(f.path);
  } catch (const kvad::Error&) {
  }
  try {
    for (const std::string& p : kvad::hf::parse_index_shards(s, "fuzz")) check_path(p);
  } catch (const kvad::Error&) {
  }
  try {
    kvad::hf::RepoRef r = kvad::hf::parse_repo_ref(s);
    if (!r.file.empty()) check_path(r.file);
    if (r.revision.find("..") != std::string::npos) __builtin_trap();
  } catch (const kvad::Error&) {
  }
  return 0;
}
