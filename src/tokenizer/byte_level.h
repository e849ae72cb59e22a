// GPT-2's byte-level alphabet (bytes_to_unicode): every byte is shown as one printable code point
// so that a vocabulary of byte strings can be stored as JSON text. Printable Latin-1 bytes map to
// themselves; the other 68 (controls, space, 0x7F-0xA0, 0xAD) map to U+0100.. in byte order.
// Internally the tokenizer works on raw bytes; this table only translates tokenizer.json pieces.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/utf8.h"

namespace kvad::tok {

struct ByteLevelAlphabet {
  std::array<uint32_t, 256> byte_to_cp{};
  std::array<int16_t, 0x144> cp_to_byte{};  // code points used are < 0x100 + 68

  ByteLevelAlphabet() {
    cp_to_byte.fill(-1);
    auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
    uint32_t next = 0x100;
    for (int b = 0; b < 256; b++) {
      uint32_t cp = printable(b) ? (uint32_t)b : next++;
      byte_to_cp[b] = cp;
      cp_to_byte[cp] = (int16_t)b;
    }
  }

  // The byte a code point stands for, or -1 when it is not in the alphabet.
  int byte_of(uint32_t cp) const { return cp < cp_to_byte.size() ? cp_to_byte[cp] : -1; }

  // "Ġhello" -> " hello"; nullopt when some code point is outside the alphabet (such a vocabulary
  // entry can never be produced by byte-level BPE). `piece` must be valid UTF-8.
  std::optional<std::string> decode(std::string_view piece) const {
    std::string out;
    out.reserve(piece.size());
    size_t i = 0;
    while (i < piece.size()) {
      int b = byte_of(next_codepoint(piece, i));
      if (b < 0) return std::nullopt;
      out += (char)b;
    }
    return out;
  }

  std::string encode(std::string_view bytes) const {
    std::string out;
    for (unsigned char c : bytes) append_utf8(out, byte_to_cp[c]);
    return out;
  }
};

inline const ByteLevelAlphabet& byte_level_alphabet() {
  static const ByteLevelAlphabet table;
  return table;
}

}  // namespace kvad::tok
