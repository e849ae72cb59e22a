#include "core/timing_table.h"

#include <algorithm>

#include <fmt/format.h>

namespace kvad {

std::string timing_table(std::vector<TimingRow> rows, const std::string& label_header) {
  double all = 0;
  for (const TimingRow& r : rows) all += r.seconds;
  std::stable_sort(rows.begin(), rows.end(), [](const TimingRow& a, const TimingRow& b) { return a.seconds > b.seconds; });
  std::string out = fmt::format("{:>9} {:>8} {:>10} {:>6}  {}\n", "ms", "calls", "us/call", "share", label_header);
  for (const TimingRow& r : rows) {
    if (r.calls == 0) continue;
    out += fmt::format("{:9.2f} {:8} {:10.2f} {:5.1f}%  {}\n", r.seconds * 1e3, r.calls, r.seconds * 1e6 / (double)r.calls,
                       100 * r.seconds / std::max(all, 1e-12), r.label);
  }
  return out;
}

}  // namespace kvad
