// The terminal's redrawn lines: a name elided to fit keeps its start and its end and never splits
// a UTF-8 character; a line cut to one row is shorter than the terminal is wide (a wrapped line
// is erased only in part: tests/term/load.sh shows it in tmux).
#include <gtest/gtest.h>

#include <string>

#include "cli/common.h"

using kvad::cli::elide_middle;
using kvad::cli::fit_terminal_row;
using kvad::cli::terminal_columns;

namespace {

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = (unsigned char)s[i];
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; k++)
      if (((unsigned char)s[i + k] & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

TEST(CliTerminal, AnElidedPathKeepsItsStartAndItsModelsName) {
  const std::string path = "/home/someone/projects/checkouts/a-deep-folder/models/SmolLM2-135M-Instruct";
  EXPECT_EQ(elide_middle(path, path.size()), path);
  EXPECT_EQ(elide_middle(path, 500), path);
  for (size_t n = 0; n < path.size(); n++) {
    const std::string e = elide_middle(path, n);
    EXPECT_LE(e.size(), n) << e;
    if (n < 12) continue;
    ASSERT_NE(e.find("..."), std::string::npos) << e;
    EXPECT_EQ(path.compare(0, e.find("..."), e, 0, e.find("...")), 0) << e;  // the start, as it was
    const std::string end = e.substr(e.find("...") + 3);
    EXPECT_EQ(path.substr(path.size() - end.size()), end) << e;  // the end, as it was
    EXPECT_GE(end.size(), e.find("...")) << e;                   // more of the end than of the start
    if (n >= 40) {
      EXPECT_NE(e.find("SmolLM2-135M-Instruct"), std::string::npos) << e;
    }
  }
}

TEST(CliTerminal, NoCutSplitsACharacter) {
  const std::string name = "modèles/日本語のモデル/Qwen3-ünïcödé-7B";
  for (size_t n = 0; n <= name.size() + 1; n++) {
    EXPECT_TRUE(valid_utf8(elide_middle(name, n))) << n;
    EXPECT_LE(elide_middle(name, n).size(), n);
  }
  const std::string row = std::string(500, 'x') + "日本語";
  EXPECT_TRUE(valid_utf8(fit_terminal_row(row)));
}

TEST(CliTerminal, ALineCutToARowIsShorterThanTheTerminal) {
  const int columns = terminal_columns();
  ASSERT_GT(columns, 0);
  EXPECT_EQ(fit_terminal_row(std::string(columns + 50, 'x')).size(), (size_t)(columns - 1));
  EXPECT_EQ(fit_terminal_row("short"), "short");
}

}  // namespace
