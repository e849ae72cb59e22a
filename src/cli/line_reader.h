// Reading what a person types in `kvad chat`: libedit's line editing and history on a terminal,
// plain lines from a pipe, and several lines as one message.
#pragma once
#include <string>

namespace kvad::cli {

class LineReader {
 public:
  // On a terminal: arrow keys, Ctrl-R search and history saved to `history_path` ("" = none).
  LineReader(bool tty, const std::string& history_path);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // One message. A line ending in '\' continues on the next line; a line that is only """ starts
  // a block that runs to the next """. Returns false at end of input (Ctrl-D). A Ctrl-C at the
  // prompt abandons what was typed and returns true with `interrupted` set and `out` empty.
  bool read_message(std::string& out, bool& interrupted);

 private:
  bool read_line(const char* prompt, std::string& out, bool& interrupted);
  bool tty_;
  std::string history_path_;
};

// While an answer streams: what the person types is not echoed into it, and is dropped when the
// answer ends (a typed-ahead line would otherwise be sent as the next message unseen). No-op off a
// terminal.
class QuietKeyboard {
 public:
  explicit QuietKeyboard(bool tty);
  ~QuietKeyboard();
  QuietKeyboard(const QuietKeyboard&) = delete;
  QuietKeyboard& operator=(const QuietKeyboard&) = delete;

 private:
  bool active_ = false;
  unsigned saved_lflag_ = 0;
};

// $XDG_STATE_HOME/kvad/chat_history (~/.local/state/kvad/chat_history), or "" without a home.
std::string chat_history_path();

}  // namespace kvad::cli
