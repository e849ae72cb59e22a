// What this process holds resident, from /proc: the tests that check memory is given back (a
// converted checkpoint's pages, a GPU model's host copies) read it here.
#pragma once
#include <algorithm>
#include <cctype>
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

// kB of the file at `path` this process holds resident through its mappings (/proc/self/smaps);
// -1 when none maps it. Only that file's pages: the test binary's own code, paged in as it runs
// (a megabyte under the sanitizers), is not counted.
inline long resident_kb_of(const std::string& path) {
  std::ifstream f("/proc/self/smaps");
  long kb = -1;
  bool in_file = false;
  for (std::string line; std::getline(f, line);) {
    if (!line.empty() && std::isxdigit((unsigned char)line[0]) && line.find('-') < line.find(' ')) {
      in_file = line.size() >= path.size() && line.compare(line.size() - path.size(), path.size(), path) == 0;
    } else if (in_file && line.rfind("Rss:", 0) == 0) {
      kb = std::max<long>(kb, 0) + std::stol(line.substr(4));
    }
  }
  return kb;
}

}  // namespace kvad::test
