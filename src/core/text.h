// The small string helpers every layer wanted a copy of: ASCII case and whitespace only (names,
// HTTP headers, file suffixes, model output), never the locale's.
#pragma once
#include <string>
#include <string_view>

namespace kvad {

inline std::string ascii_lower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
  return s;
}

// s without the spaces, tabs, and line, form and vertical-tab breaks at either end.
inline std::string trim_space(std::string_view s) {
  constexpr std::string_view space = " \t\n\v\f\r";
  const size_t b = s.find_first_not_of(space);
  if (b == std::string_view::npos) return {};
  return std::string(s.substr(b, s.find_last_not_of(space) - b + 1));
}

}  // namespace kvad
