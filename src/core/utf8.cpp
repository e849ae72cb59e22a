#include "core/utf8.h"

namespace kvad {

// Length of the valid sequence starting at s[i], or 0 with `bad` set to the maximal-subpart length.
static size_t valid_seq(std::string_view s, size_t i, size_t* bad) {
  auto b = [&](size_t k) { return (unsigned char)s[k]; };
  unsigned c = b(i);
  if (c < 0x80) return 1;
  size_t need;
  unsigned lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) need = 1;
  else if (c == 0xE0) need = 2, lo = 0xA0;
  else if (c >= 0xE1 && c <= 0xEC) need = 2;
  else if (c == 0xED) need = 2, hi = 0x9F;
  else if (c >= 0xEE && c <= 0xEF) need = 2;
  else if (c == 0xF0) need = 3, lo = 0x90;
  else if (c >= 0xF1 && c <= 0xF3) need = 3;
  else if (c == 0xF4) need = 3, hi = 0x8F;
  else {
    *bad = 1;
    return 0;
  }
  size_t k = 1;
  for (; k <= need; k++) {
    if (i + k >= s.size()) break;
    unsigned d = b(i + k);
    unsigned l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (d < l || d > h) break;
  }
  if (k == need + 1) return need + 1;
  *bad = k;  // the lead byte and the continuation bytes that were still acceptable
  return 0;
}

std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    size_t bad = 0, n = valid_seq(s, i, &bad);
    if (n) {
      out.append(s.data() + i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += bad;
    }
  }
  return out;
}

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t bad = 0, n = valid_seq(s, i, &bad);
    if (!n) return false;
    i += n;
  }
  return true;
}

size_t utf8_complete_prefix(std::string_view s) {
  // Look back at most 3 bytes for a lead byte whose sequence is cut off by the end of s.
  size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; back++) {
    unsigned c = (unsigned char)s[n - back];
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (need > back && c >= 0xC2 && c <= 0xF4) {
      size_t bad = 0;
      // Only hold back if what we have so far could still become valid.
      std::string_view tail = s.substr(n - back);
      size_t ok = valid_seq(tail, 0, &bad);
      if (!ok && bad == back) return n - back;
    }
    return n;
  }
  return n;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += (char)cp;
  } else if (cp < 0x800) {
    out += (char)(0xC0 | (cp >> 6));
    out += (char)(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += (char)(0xE0 | (cp >> 12));
    out += (char)(0x80 | ((cp >> 6) & 0x3F));
    out += (char)(0x80 | (cp & 0x3F));
  } else {
    out += (char)(0xF0 | (cp >> 18));
    out += (char)(0x80 | ((cp >> 12) & 0x3F));
    out += (char)(0x80 | ((cp >> 6) & 0x3F));
    out += (char)(0x80 | (cp & 0x3F));
  }
}

uint32_t next_codepoint(std::string_view s, size_t& i) {
  unsigned c = (unsigned char)s[i];
  if (c < 0x80) {
    i += 1;
    return c;
  }
  int n = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : 1;
  uint32_t cp = c & (0x3F >> n);
  for (int k = 1; k <= n && i + k < s.size(); k++) cp = (cp << 6) | ((unsigned char)s[i + k] & 0x3F);
  i += n + 1;
  return cp;
}

std::string utf8_prefix(std::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes) return std::string(s);
  size_t n = max_bytes;
  while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) --n;
  return std::string(s.substr(0, n));
}

std::string text_snippet(std::string_view s, size_t max_bytes) {
  return s.size() <= max_bytes ? std::string(s) : utf8_prefix(s, max_bytes) + "...";
}

}  // namespace kvad
