// Reads one line of core/timing_table.h's table back: the calls (and ms) of `label`, -1 when the
// table has no such line.
#pragma once
#include <cstdio>
#include <string>

namespace kvad::test {

inline long timing_calls(const std::string& table, const std::string& label, double* ms = nullptr) {
  const size_t at = table.find("%  " + label + "\n");
  if (at == std::string::npos) return -1;
  const size_t start = table.rfind('\n', at) + 1;  // npos + 1 == 0: the first line
  double t = 0;
  long n = -1;
  if (std::sscanf(table.c_str() + start, "%lf %ld", &t, &n) != 2) return -1;
  if (ms) *ms = t;
  return n;
}

}  // namespace kvad::test
