#include "runtime/nq_cache.h"

#include <cstdio>
#include <algorithm>
#include <filesystem>

#include "core/fs.h"
#include "io/store.h"

namespace kvad {

namespace fs = std::filesystem;

static std::string model_field(const std::string& key, const std::string& path) {
  if (key.rfind("hf:", 0) == 0) {
    std::string r = key.substr(3);
    size_t slash = r.find('/');
    return slash == std::string::npos ? r : r.substr(0, slash) + "--" + r.substr(slash + 1);
  }
  if (key.rfind("store:", 0) == 0) return "kvad--" + key.substr(6);
  std::error_code ec;
  std::string abs = fs::weakly_canonical(path, ec).string();
  if (ec) abs = path;
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : abs) h = (h ^ c) * 1099511628211ull;
  std::string base = fs::path(abs).filename().string();
  if (base.empty()) base = "model";
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h);
  return base + "-" + std::string(hex, 8);
}

std::string nq_cache_file(const std::string& key, const std::string& path, WeightFormat fmt) {
  return join_path(store_cache_dir(), model_field(key, path) + "." + weight_format_name(fmt) + ".nq");
}

std::string gpu_nq_cache_file(const std::string& key, const std::string& path, WeightFormat fmt) {
  return join_path(store_cache_dir(), model_field(key, path) + ".gpu-" + weight_format_name(fmt) + ".nq");
}

std::vector<NqCacheEntry> list_nq_caches() {
  std::vector<NqCacheEntry> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(store_cache_dir(), ec)) {
    std::string name = e.path().filename().string();
    if (!e.is_regular_file() || name.size() < 4 || name.substr(name.size() - 3) != ".nq") continue;
    std::string stem = name.substr(0, name.size() - 3);
    size_t dot = stem.rfind('.');
    NqCacheEntry c;
    c.file = e.path().string();
    c.model = dot == std::string::npos ? stem : stem.substr(0, dot);
    c.format = dot == std::string::npos ? "?" : stem.substr(dot + 1);
    c.bytes = (uint64_t)e.file_size(ec);
    out.push_back(c);
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.file < b.file; });
  return out;
}

std::vector<NqCacheEntry> forget_nq_caches(const std::string& model) {
  std::string want = model;
  size_t slash = want.find('/');
  if (slash != std::string::npos) want = want.substr(0, slash) + "--" + want.substr(slash + 1);
  std::vector<NqCacheEntry> removed;
  for (const NqCacheEntry& c : list_nq_caches())
    if (c.model == want || c.model == "kvad--" + want) {
      std::error_code ec;
      if (fs::remove(c.file, ec)) removed.push_back(c);
    }
  return removed;
}

}  // namespace kvad
