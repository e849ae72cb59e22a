// What this process holds resident, from /proc: the tests that check memory is given back (a
// converted checkpoint's pages, a GPU model's host copies) and that buffers got huge pages read it here.
#pragma once
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

namespace kvad::test {

// A field of /proc/self/status in kB ("RssAnon", "RssFile"); -1 when absent.
inline long status_kb(const std::string& field) {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  return -1;
}

// A field of /proc/self/smaps in kB ("Rss", "AnonHugePages"), summed over the mappings whose
// first line ("lo-hi perms offset dev inode [path]") `which` accepts; -1 when none does.
template <typename Which>
long smaps_field_kb(const std::string& field, Which&& which) {
  std::ifstream f("/proc/self/smaps");
  const std::string key = field + ":";
  long kb = -1;
  bool inside = false;
  for (std::string line; std::getline(f, line);) {
    if (!line.empty() && std::isxdigit((unsigned char)line[0]) && line.find('-') < line.find(' ')) {
      inside = which(line);  // a mapping's first line; its fields follow as "Name: value"
    } else if (inside && line.rfind(key, 0) == 0) {
      kb = std::max<long>(kb, 0) + std::stol(line.substr(key.size()));
    }
  }
  return kb;
}

// kB of the file at `path` this process holds resident through its mappings; -1 when none maps
// it. Only that file's pages: the test binary's own code, paged in as it runs (a megabyte under
// the sanitizers), is not counted.
inline long resident_kb_of(const std::string& path) {
  return smaps_field_kb("Rss", [&](const std::string& mapping) {
    return mapping.size() >= path.size() && mapping.compare(mapping.size() - path.size(), path.size(), path) == 0;
  });
}

// AnonHugePages of the mapping that holds p (kB); -1 when the kernel has no such field.
inline long anon_huge_kb_at(const void* p) {
  return smaps_field_kb("AnonHugePages", [&](const std::string& mapping) {
    unsigned long lo = 0, hi = 0;
    return std::sscanf(mapping.c_str(), "%lx-%lx", &lo, &hi) == 2 && (uintptr_t)p >= lo && (uintptr_t)p < hi;
  });
}

}  // namespace kvad::test
