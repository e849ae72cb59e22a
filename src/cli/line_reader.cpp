#include "cli/line_reader.h"

#include <termios.h>
#include <unistd.h>
// libedit (BSD licence) through its readline-compatible interface: GNU readline is GPL-3.
#include <editline/readline.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "cli/generation_io.h"
#include "core/fs.h"

namespace kvad::cli {

namespace {
constexpr int kHistoryLines = 1000;
void strip_newline(std::string& s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
}
}  // namespace

std::string chat_history_path() {
  if (const char* state = std::getenv("XDG_STATE_HOME"); state && *state) return join_path(join_path(state, "kvad"), "chat_history");
  const char* home = std::getenv("HOME");
  if (!home || !*home) return "";
  return join_path(join_path(home, ".local/state/kvad"), "chat_history");
}

LineReader::LineReader(bool tty, const std::string& history_path) : tty_(tty), history_path_(history_path) {
  if (!tty_) return;
  rl_outstream = stderr;  // prompts and editing on stderr: stdout carries only the answers
  rl_initialize();
  stifle_history(kHistoryLines);
  if (!history_path_.empty()) read_history(history_path_.c_str());
}

LineReader::~LineReader() {
  if (!tty_ || history_path_.empty()) return;
  size_t cut = history_path_.rfind('/');
  try {
    if (cut != std::string::npos) make_directories(history_path_.substr(0, cut));
    write_history(history_path_.c_str());
  } catch (const std::exception&) {
    // A history that cannot be saved (read-only home) costs the person only their history.
  }
}

bool LineReader::read_line(const char* prompt, std::string& out, bool& interrupted) {
  out.clear();
  if (tty_) {
    g_interrupted = false;
    errno = 0;
    char* line = readline(prompt);
    if (g_interrupted) {  // Ctrl-C: libedit returns what it had; the line is abandoned
      std::free(line);
      g_interrupted = false;
      interrupted = true;
      std::fputc('\n', stderr);
      return true;
    }
    if (!line) return false;
    out = line;
    std::free(line);
    return true;
  }
  char* buf = nullptr;
  size_t cap = 0;
  ssize_t n = getline(&buf, &cap, stdin);
  if (n >= 0) out.assign(buf, (size_t)n);
  std::free(buf);
  if (n < 0) return false;
  strip_newline(out);
  return true;
}

bool LineReader::read_message(std::string& out, bool& interrupted) {
  interrupted = false;
  std::string line;
  if (!read_line("> ", line, interrupted)) return false;
  if (interrupted) return out.clear(), true;
  std::string message;
  if (line == "\"\"\"") {  // a block, as Ollama's
    for (;;) {
      if (!read_line("... ", line, interrupted)) break;  // end of input closes the block
      if (interrupted) return out.clear(), true;
      if (line == "\"\"\"") break;
      message += (message.empty() ? "" : "\n") + line;
    }
  } else {
    while (!line.empty() && line.back() == '\\') {
      line.pop_back();
      message += line + "\n";
      if (!read_line("... ", line, interrupted)) break;
      if (interrupted) return out.clear(), true;
    }
    message += line;
  }
  if (tty_ && !message.empty()) add_history(message.c_str());
  out = message;
  return true;
}

QuietKeyboard::QuietKeyboard(bool tty) {
  termios t{};
  if (!tty || tcgetattr(0, &t) != 0) return;
  saved_lflag_ = t.c_lflag;
  t.c_lflag &= ~(ECHO | ICANON);  // ISIG stays: Ctrl-C still stops the answer
  active_ = tcsetattr(0, TCSANOW, &t) == 0;
}

QuietKeyboard::~QuietKeyboard() {
  if (!active_) return;
  termios t{};
  tcgetattr(0, &t);
  t.c_lflag = saved_lflag_;
  tcflush(0, TCIFLUSH);
  tcsetattr(0, TCSANOW, &t);
}

}  // namespace kvad::cli
