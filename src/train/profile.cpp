#include "train/profile.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace kvad::train {

namespace {
std::map<std::string, std::pair<double, long>>& table() {
  static std::map<std::string, std::pair<double, long>> t;
  return t;
}
}  // namespace

bool profiling() {
  static const bool on = [] {
    const char* e = std::getenv("KVAD_TRAIN_PROFILE");
    return e && *e && *e != '0';
  }();
  return on;
}

void profile_add(const char* phase, double seconds) {
  auto& e = table()[phase];
  e.first += seconds;
  e.second++;
}

void profile_report(FILE* f) {
  if (!f || table().empty()) return;
  std::vector<std::pair<std::string, std::pair<double, long>>> rows(table().begin(), table().end());
  std::sort(rows.begin(), rows.end(), [](auto& a, auto& b) { return a.second.first > b.second.first; });
  double total = 0;
  for (auto& r : rows) total += r.second.first;
  std::fprintf(f, "%-22s %10s %7s %8s\n", "phase", "seconds", "share", "calls");
  for (auto& [name, v] : rows)
    std::fprintf(f, "%-22s %10.3f %6.1f%% %8ld\n", name.c_str(), v.first, 100 * v.first / total, v.second);
  table().clear();
}

}  // namespace kvad::train
