// The table both profilers print (KVAD_PROFILE's per backend operation, KVAD_VULKAN_PROFILE's
// per shader and grid): one line per label, largest total first,
//   "<ms> <calls> <us/call> <share>%  <label>"
// with a header naming the label column. One format, so one parser reads either.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kvad {

struct TimingRow {
  std::string label;
  uint64_t calls = 0;
  double seconds = 0;
};

// Rows with no calls are left out; shares are of the rows' sum.
std::string timing_table(std::vector<TimingRow> rows, const std::string& label_header);

}  // namespace kvad
