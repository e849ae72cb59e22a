// Naming and housekeeping of .nq quantised-weight caches in kvad's cache folder:
//   <model>.<format>.nq   (and the GPU's <model>.gpu-<format>.nq) with <model> = Org--Name (Hub), kvad--NAME (kvad's store), or
//                          <folder name>-<hash of its absolute path> (a folder given by path).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend/weight.h"

namespace kvad {

// `key` is ResolvedModel::key ("hf:Org/Name", "store:NAME" or "" for a folder path).
std::string nq_cache_file(const std::string& key, const std::string& path, WeightFormat fmt);
// The GPU backend's cache of the same model in its own layout: <model>.gpu-<format>.nq (never
// confused with the CPU's <model>.<format>.nq; `kvad cache` lists and forgets both).
std::string gpu_nq_cache_file(const std::string& key, const std::string& path, WeightFormat fmt);

struct NqCacheEntry {
  std::string file, model, format;
  uint64_t bytes = 0;
};
std::vector<NqCacheEntry> list_nq_caches();
// Removes the caches of a model (Org/Name, a store name, or the cache's own model field);
// returns what was removed.
std::vector<NqCacheEntry> forget_nq_caches(const std::string& model);

}  // namespace kvad
