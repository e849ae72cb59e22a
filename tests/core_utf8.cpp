#include <gtest/gtest.h>

#include "core/utf8.h"

using namespace kvad;

TEST(Utf8, SanitizeReplacesMaximalSubparts) {
  // Cases from the WHATWG encoding standard / Unicode "best practice" for U+FFFD substitution.
  EXPECT_EQ(sanitize_utf8("a\xC3(b"), "a\xEF\xBF\xBD(b");
  EXPECT_EQ(sanitize_utf8("\xE2\x82"), "\xEF\xBF\xBD");           // truncated 3-byte: one U+FFFD
  EXPECT_EQ(sanitize_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate: 3
  EXPECT_EQ(sanitize_utf8("\xF0\x9F\x98"), "\xEF\xBF\xBD");
  EXPECT_EQ(sanitize_utf8("\xFF\xFE"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(sanitize_utf8("h\xC3\xA9llo"), "h\xC3\xA9llo");
}

TEST(Utf8, CompletePrefixHoldsBackCutSequences) {
  std::string emoji = "\xF0\x9F\x98\x80";
  for (size_t k = 1; k < 4; k++) EXPECT_EQ(utf8_complete_prefix("ab" + emoji.substr(0, k)), 2u) << k;
  EXPECT_EQ(utf8_complete_prefix("ab" + emoji), 6u);
  EXPECT_EQ(utf8_complete_prefix("ab\xFF"), 3u);  // invalid byte: nothing to wait for
}
