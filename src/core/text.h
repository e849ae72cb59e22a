// The small string helpers every layer wanted a copy of: ASCII case and whitespace only (names,
// HTTP headers, file suffixes, model output), never the locale's.
#pragma once
#include <string>
#include <string_view>

namespace kvad {

inline char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c; }

inline std::string ascii_lower(std::string s) {
  for (char& c : s) c = ascii_lower(c);
  return s;
}

// Whether s ends with suffix, ASCII case aside (".GGUF" is a ".gguf" file).
inline bool ends_with_ignoring_case(std::string_view s, std::string_view suffix) {
  if (s.size() < suffix.size()) return false;
  for (size_t i = 0, at = s.size() - suffix.size(); i < suffix.size(); i++)
    if (ascii_lower(s[at + i]) != ascii_lower(suffix[i])) return false;
  return true;
}

// s without the spaces, tabs, and line, form and vertical-tab breaks at either end.
inline std::string trim_space(std::string_view s) {
  constexpr std::string_view space = " \t\n\v\f\r";
  const size_t b = s.find_first_not_of(space);
  if (b == std::string_view::npos) return {};
  return std::string(s.substr(b, s.find_last_not_of(space) - b + 1));
}

}  // namespace kvad
