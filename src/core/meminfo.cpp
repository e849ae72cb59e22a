#include "core/meminfo.h"

#include <fstream>

namespace kvad {

uint64_t meminfo_bytes(const std::string& key) {
  std::ifstream f("/proc/meminfo");
  std::string k, unit;
  uint64_t kb = 0;
  while (f >> k >> kb >> unit)
    if (k == key + ":") return kb * 1024;
  return 0;
}

}  // namespace kvad
