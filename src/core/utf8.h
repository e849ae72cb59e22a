// UTF-8 helpers shared by the tokenizer, the streaming detokeniser and the server.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace kvad {

// Replaces every ill-formed sequence with U+FFFD the way WHATWG's decoder (and Python's
// errors="replace") does: one replacement per maximal subpart.
std::string sanitize_utf8(std::string_view s);
bool is_valid_utf8(std::string_view s);
// Length of the longest prefix of s that does not end inside an incomplete (but so far valid)
// multi-byte sequence: what can be emitted now while streaming.
size_t utf8_complete_prefix(std::string_view s);
void append_utf8(std::string& out, uint32_t cp);
// The first max_bytes of s, cut back to a character boundary (s itself when it fits).
std::string utf8_prefix(std::string_view s, size_t max_bytes);
// A piece of outside text as an error quotes it: at most max_bytes (plus "..." when cut), so that
// no message echoes an unbounded part of its input (issue 9).
std::string text_snippet(std::string_view s, size_t max_bytes = 40);
// Decodes one code point at s[i] (s must be valid UTF-8); advances i.
uint32_t next_codepoint(std::string_view s, size_t& i);

}  // namespace kvad
