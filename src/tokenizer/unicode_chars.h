// Character classes and UTF-8 stepping shared by the tokenizer's parts (added tokens, normalizers,
// pre-tokenizers, models). Text handed to them is always valid UTF-8.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kvad::tok {

// Unicode White_Space (Rust's char::is_whitespace and the regex crate's \s, which HF uses for
// lstrip/rstrip, the Strip normalizer and WhitespaceSplit).
inline bool is_white_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Start of the code point that ends at byte `end` (end > 0).
inline size_t prev_char_start(std::string_view text, size_t end) {
  size_t i = end - 1;
  while (i > 0 && ((unsigned char)text[i] & 0xC0) == 0x80) i--;
  return i;
}

// Length in bytes of the UTF-8 sequence that starts with `lead`.
inline size_t utf8_char_len(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

}  // namespace kvad::tok
