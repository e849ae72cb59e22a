// kvad tui: a full-screen terminal UI (ncurses): the conversation on the left, a live dashboard on
// the right (prefill and decode tok/s, time to first token, the KV cache now and at full context,
// weights, RSS), the input line at the bottom. Generation runs on its own thread so the screen
// stays live and Esc stops an answer; `p` on the dashboard (Tab) or F2 reloads the model in the
// next weight format it offers, keeping the conversation. The conversation's rules are
// cli/conversation.h's, shared with `kvad chat`.
#define NCURSES_WIDECHAR 1
#include <ncursesw/curses.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <clocale>
#include <cwchar>
#include <mutex>
#include <thread>

#include "cli/conversation.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/threads.h"
#include "models/registry.h"
#include "runtime/devices.h"
#include "runtime/engine.h"
#include "serve/metrics.h"  // rss_bytes: the one reading of /proc/self/statm

namespace kvad::cli {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kDashWidth = 40;

// The configurations the loaded model can be reloaded in, in cycling order: every CPU format of
// the weight layer (backend/weight.h) for a safetensors model, the K-quants only when every matrix
// width is a multiple of 256; then, when a GPU is usable and the architecture runs there, bf16, q8
// and q4 on it (and the K-quants as on the CPU). A .gguf runs as stored.
struct Config {
  std::string device, format;
  std::string label() const { return device + " " + format; }
};

// The device `p` offers beside the CPU: the one --device named, else the first GPU (lavapipe only
// with KVAD_VULKAN_ALLOW_CPU=1, as --device gpu); "" when there is none.
std::string offered_gpu(const LoadedModel& m, const ModelArgs& args) {
  if (!gpu_runs(m.model->config().architecture)) return "";
  if (is_gpu_device(args.device)) return args.device;
  static const std::string gpu = default_gpu_device();  // drawn every frame: asked once
  return gpu;
}

std::vector<Config> offered_configs(const LoadedModel& m, const ModelArgs& args) {
  if (is_gguf_path(m.path)) return {};
  std::vector<std::string> f = {"f32", "bf16", "q8", "q4"};
  const ModelConfig& c = m.model->config();
  const bool kq = c.hidden % 256 == 0 && c.intermediate % 256 == 0 && c.q_dim() % 256 == 0 && c.kv_dim() % 256 == 0;
  if (kq) f.insert(f.end(), {"q6k", "q4k"});
  std::vector<Config> out;
  for (const std::string& name : f) out.push_back({"cpu", name});
  if (std::string gpu = offered_gpu(m, args); !gpu.empty()) {
    for (const char* name : {"bf16", "q8", "q4"}) out.push_back({gpu, name});
    if (kq)
      for (const char* name : {"q6k", "q4k"}) out.push_back({gpu, name});
  }
  return out;
}

std::string mb(double bytes) {
  return bytes < 1e6 ? fmt::format("{:.1f} KB", bytes / 1e3) : fmt::format("{:.1f} MB", bytes / 1e6);
}

// The keys, said on the status line until something else is: the longest wording that fits.
const std::string kKeyHints[] = {
    "Enter sends · Esc stops an answer · Tab: dashboard (p format, r reset, q quit) · F2 format · Ctrl-D quits",
    "Enter sends · Esc stops · Tab: dashboard (p r q) · F2 format · Ctrl-D quits",
    "Enter send · Esc stop · Tab dashboard · F2 format · ^D quit",
    "Esc stop · Tab · F2 format · ^D quit",
};

// Display columns of UTF-8 text, and where to cut it to fit `cols` (whole characters).
size_t cut_to_columns(const std::string& s, size_t from, int cols, int& used) {
  std::mbstate_t st{};
  size_t i = from;
  used = 0;
  while (i < s.size() && s[i] != '\n') {
    wchar_t wc;
    size_t n = std::mbrtowc(&wc, s.data() + i, s.size() - i, &st);
    if (n == (size_t)-1 || n == (size_t)-2) n = 1, wc = L'?', st = {};
    int w = std::max(0, wcwidth(wc));
    if (used + w > cols) break;
    used += w;
    i += n == 0 ? 1 : n;
  }
  return i;
}

const std::string& key_hints(int cols) {
  for (const std::string& h : kKeyHints) {
    int used = 0;
    if (cut_to_columns(h, 0, 1 << 30, used) == h.size() && used <= cols) return h;
  }
  return kKeyHints[std::size(kKeyHints) - 1];
}

// Text wrapped to `cols` columns, at spaces where a line has one.
std::vector<std::string> wrap(const std::string& text, int cols) {
  std::vector<std::string> lines;
  size_t i = 0;
  while (i <= text.size()) {
    int used = 0;
    size_t end = cut_to_columns(text, i, cols, used);
    if (end < text.size() && text[end] != '\n') {
      size_t space = text.rfind(' ', end);
      if (space != std::string::npos && space > i) end = space + 1;
    }
    lines.push_back(text.substr(i, end - i));
    if (end >= text.size()) break;
    i = end + (text[end] == '\n' ? 1 : 0);
  }
  return lines;
}

// What the process writes to stderr while the screen is up (a loader's "quantised to q8, cached
// to ..." during a reload, a warning), caught through a pipe and shown on the status line: written
// to the terminal directly it scrolled the screen under ncurses, which then drew every later
// change one row off. What was caught is written to the real stderr once the screen is gone.
class StderrToStatus {
 public:
  StderrToStatus() {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return;
    saved_ = dup(2);
    if (saved_ < 0 || dup2(fds[1], 2) < 0) {
      close(fds[0]), close(fds[1]);
      return;
    }
    close(fds[1]);
    reader_ = std::thread([this, fd = fds[0]] {
      char buf[4096];
      for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) {
        std::lock_guard<std::mutex> lock(mu_);
        caught_.append(buf, (size_t)n);
        if (caught_.size() > (1 << 20)) caught_.erase(0, caught_.size() - (1 << 20));  // bounded
      }
      close(fd);
    });
  }
  // The newest complete line caught, or "" when nothing new came since the last call.
  std::string take_line() {
    std::lock_guard<std::mutex> lock(mu_);
    size_t end = caught_.rfind('\n');
    if (end == std::string::npos || end + 1 <= shown_upto_) return "";
    size_t begin = caught_.rfind('\n', end == 0 ? 0 : end - 1);
    begin = begin == std::string::npos || begin >= end ? 0 : begin + 1;
    shown_upto_ = end + 1;
    return caught_.substr(begin, end - begin);
  }
  ~StderrToStatus() {
    if (saved_ < 0) return;
    dup2(saved_, 2);  // closes the pipe's last write end: the reader sees EOF
    close(saved_);
    if (reader_.joinable()) reader_.join();
    if (!caught_.empty() && write(2, caught_.data(), caught_.size()) < 0) {}
  }

 private:
  int saved_ = -1;
  std::thread reader_;
  std::mutex mu_;
  std::string caught_;
  size_t shown_upto_ = 0;
};

// What the generation thread shares with the screen.
struct Stream {
  std::mutex mu;
  std::string text;           // the answer so far
  std::string notice, error;  // set when the turn ends
  int64_t tokens = 0;
  int64_t cached = 0;         // the session's positions and KV bytes, read on the generation thread
  size_t kv_bytes = 0;
  Clock::time_point started, first_token;
  std::atomic<bool> running{false}, stop{false}, finished{false};
};

class Tui {
 public:
  explicit Tui(Conversation& c) : c_(c) {}

  int run() {
    std::setlocale(LC_ALL, "");
    initscr();
    raw();  // Ctrl-C is a key (stop the answer), not a signal that kills the screen
    noecho();
    keypad(stdscr, TRUE);
    set_escdelay(25);  // Esc alone stops an answer at once, not after the default second
    timeout(50);  // the screen refreshes while an answer streams
    if (has_colors()) {
      start_color();
      use_default_colors();
      init_pair(1, COLOR_CYAN, -1);
      init_pair(2, COLOR_GREEN, -1);
      init_pair(3, COLOR_YELLOW, -1);
    }
    status_ = kKeyHints[0];
    StderrToStatus stderr_lines;  // until endwin(): nothing may write to the terminal behind ncurses
    while (!quit_) {
      collect_finished();
      if (std::string line = stderr_lines.take_line(); !line.empty()) note_ = line;
      draw();
      wint_t ch;
      int kind = get_wch(&ch);
      if (kind == ERR) continue;
      key(kind, ch);
    }
    stop_generation();
    endwin();
    return 0;
  }

 private:
  void key(int kind, wint_t ch) {
    if (kind == KEY_CODE_YES) {
      if (ch == KEY_RESIZE) return;
      if (ch == KEY_F(2)) return cycle_format();
      if (ch == KEY_PPAGE) scroll_ += 10;
      else if (ch == KEY_NPAGE) scroll_ = std::max(0, scroll_ - 10);
      else if (ch == KEY_BACKSPACE) backspace();
      else if (ch == KEY_LEFT) cursor_ = prev_char(cursor_);
      else if (ch == KEY_RIGHT) cursor_ = next_char(cursor_);
      else if (ch == KEY_HOME) cursor_ = 0;
      else if (ch == KEY_END) cursor_ = input_.size();
      else if (ch == KEY_ENTER) submit();
      return;
    }
    if (ch == 27 || ch == 3) {  // Esc, Ctrl-C: stop the answer; on the dashboard, back to typing
      if (stream_.running) stream_.stop = true;
      else if (ch == 3 && input_.empty()) quit_ = true;
      dashboard_focus_ = false;
      return;
    }
    if (ch == 4 && input_.empty()) return void(quit_ = true);  // Ctrl-D
    if (ch == '\t') return void(dashboard_focus_ = !dashboard_focus_);
    if (dashboard_focus_) {
      if (ch == 'p') cycle_format();
      else if (ch == 'q') quit_ = true;
      else if (ch == 'r' && !stream_.running) c_.reset(), status_ = "(conversation cleared)";
      return;
    }
    if (ch == '\n' || ch == '\r') return submit();
    if (ch == 127 || ch == 8) return backspace();
    if (ch == 21) return void((input_.clear(), cursor_ = 0));  // Ctrl-U
    if (ch == 12) return void(clearok(curscr, TRUE));  // Ctrl-L: repaint the whole screen
    if (ch < 32) return;
    char buf[MB_LEN_MAX];
    std::mbstate_t st{};
    size_t n = std::wcrtomb(buf, (wchar_t)ch, &st);
    if (n == (size_t)-1) return;
    input_.insert(cursor_, buf, n);
    cursor_ += n;
  }

  size_t prev_char(size_t i) const {
    if (i == 0) return 0;
    do i--; while (i > 0 && ((unsigned char)input_[i] & 0xC0) == 0x80);
    return i;
  }
  size_t next_char(size_t i) const {
    if (i >= input_.size()) return input_.size();
    do i++; while (i < input_.size() && ((unsigned char)input_[i] & 0xC0) == 0x80);
    return i;
  }
  void backspace() {
    size_t p = prev_char(cursor_);
    input_.erase(p, cursor_ - p);
    cursor_ = p;
  }

  void submit() {
    if (stream_.running || input_.empty()) return;
    note_.clear();
    std::string text = input_;
    input_.clear();
    cursor_ = 0;
    if (text[0] == '/' && text.rfind("//", 0) != 0) return command(text);
    if (text.rfind("//", 0) == 0) text.erase(0, 1);
    start_generation(text);
  }

  void command(const std::string& line) {
    std::string name = line.substr(0, line.find(' '));
    std::string rest = line.size() > name.size() ? line.substr(name.size() + 1) : "";
    try {
      if (name == "/quit" || name == "/exit" || name == "/bye") quit_ = true;
      else if (name == "/reset" || name == "/clear") c_.reset(), status_ = "(conversation cleared)";
      else if (name == "/set") status_ = c_.set(rest);
      else if (name == "/save") status_ = c_.save(rest);
      else if (name == "/load") {
        status_ = "loading " + rest + "...";
        draw();
        std::string said = c_.load(rest);
        status_ = said.empty() ? "(loaded " + rest + ")" : said;
      } else
        status_ = "unknown command " + name.substr(0, 40) + " (/set /save /load /reset /quit)";
    } catch (const Error& e) {
      status_ = std::string("error: ") + e.what();
    }
    for (char& ch : status_)
      if (ch == '\n') ch = ' ';
  }

  void start_generation(const std::string& text) {
    pending_user_ = text;
    shown_ = c_.messages();  // the screen draws this copy while the generation thread owns the conversation
    {
      std::lock_guard<std::mutex> lock(stream_.mu);
      stream_.text.clear();
      stream_.notice.clear();
      stream_.error.clear();
      stream_.tokens = 0;
      stream_.started = Clock::now();
      stream_.first_token = {};
    }
    stream_.stop = false;
    stream_.finished = false;
    stream_.running = true;
    scroll_ = 0;
    worker_ = std::thread([this, text] {
      std::string notice, error;
      try {
        const Session& session = *c_.running().session;
        c_.say(text, [this, &session](const std::string& piece) {
          std::lock_guard<std::mutex> lock(stream_.mu);
          if (stream_.tokens++ == 0) stream_.first_token = Clock::now();
          stream_.text += piece;
          stream_.cached = session.cached();
          stream_.kv_bytes = session.kv_bytes();
          return !stream_.stop.load();
        }, notice);
      } catch (const std::exception& e) {
        error = e.what();
      }
      std::lock_guard<std::mutex> lock(stream_.mu);
      stream_.notice = notice;
      stream_.error = error;
      stream_.finished = true;
    });
  }

  void collect_finished() {
    if (!stream_.running || !stream_.finished) return;
    worker_.join();
    stream_.running = false;
    pending_user_.clear();
    std::lock_guard<std::mutex> lock(stream_.mu);
    if (!stream_.error.empty()) status_ = "error: " + stream_.error;
    else if (!stream_.notice.empty()) status_ = stream_.notice;
    else if (const GenerateResult* r = c_.last(); r && r->context_full)
      status_ = fmt::format("(the answer stopped: the context of {} tokens is full; the next turn drops the oldest)", r->context_full);
    else status_.clear();
  }

  void stop_generation() {
    if (!stream_.running) return;
    stream_.stop = true;
    worker_.join();
    stream_.running = false;
  }

  void cycle_format() {
    if (stream_.running) return void(status_ = "(an answer is streaming: Esc stops it first)");
    std::vector<Config> f = offered_configs(c_.running().m, c_.model_args());
    if (f.empty()) return void(status_ = "(a .gguf runs as stored: no other format to switch to)");
    const Config now{c_.model_args().device, c_.running().m.model->weight_format()};
    auto it = std::find_if(f.begin(), f.end(), [&](const Config& x) { return x.label() == now.label(); });
    const Config next = it == f.end() || it + 1 == f.end() ? f[0] : *(it + 1);
    status_ = "reloading as " + next.label() + "...";
    note_.clear();
    draw();
    try {
      c_.reload_as(next.format, next.device);
      status_ = fmt::format("(now {}: the conversation is kept; its next turn is prefilled again)", next.label());
    } catch (const Error& e) {
      status_ = fmt::format("error: {}: {}", next.label(), e.what());
    }
  }

  // --- drawing ---------------------------------------------------------------------------

  void draw() {
    erase();
    int dash = COLS >= 80 ? kDashWidth : 0;
    int chat_w = COLS - dash - (dash ? 1 : 0);
    draw_conversation(chat_w, LINES - 3);
    if (dash) draw_dashboard(chat_w + 1, dash, LINES - 3);
    draw_input();
    refresh();
  }

  void draw_conversation(int width, int height) {
    std::vector<std::pair<int, std::string>> lines;  // colour pair, text
    auto add = [&](int pair, const std::string& who, const std::string& text) {
      for (const std::string& l : wrap(who + text, std::max(10, width))) lines.push_back({pair, l});
      lines.push_back({0, ""});
    };
    for (const OrderedJson& msg : stream_.running ? shown_ : c_.messages()) {
      std::string role = msg["role"];
      add(role == "user" ? 1 : role == "system" ? 3 : 0, role == "user" ? "you: " : role == "system" ? "system: " : "model: ",
          msg["content"].get<std::string>());
    }
    if (stream_.running) {
      std::lock_guard<std::mutex> lock(stream_.mu);
      add(1, "you: ", pending_user_);
      add(0, "model: ", stream_.text + "▌");
    }
    if (lines.empty())
      lines.push_back({3, fmt::format("kvad tui: {}. Type a message and press Enter.", c_.running().m.name)});
    int top = std::max(0, (int)lines.size() - height - scroll_);
    for (int row = 0; row < height && top + row < (int)lines.size(); row++) {
      auto& [pair, text] = lines[(size_t)(top + row)];
      if (pair) attron(COLOR_PAIR(pair));
      mvaddstr(row, 0, text.c_str());
      if (pair) attroff(COLOR_PAIR(pair));
    }
  }

  void draw_dashboard(int x, int width, int height) {
    const RunningModel& r = c_.running();
    const Session& s = *r.session;
    int y = 0;
    auto line = [&](const std::string& k, const std::string& v) {
      if (y >= height) return;
      mvaddstr(y, x, fmt::format("{:<13}", k).c_str());
      int used = 0;
      size_t end = cut_to_columns(v, 0, width - 14, used);
      mvaddstr(y++, x + 14, v.substr(0, end).c_str());
    };
    mvvline(0, x - 1, dashboard_focus_ ? '#' : '|', height);
    attron(A_BOLD);
    mvaddstr(y++, x, dashboard_focus_ ? "dashboard (p q r, Tab back)" : "dashboard");
    attroff(A_BOLD);
    line("model", r.m.name.substr(r.m.name.find_last_of('/') + 1));
    line("architecture", r.m.model->config().model_type);
    line("parameters", format_parameters(r.m.model->parameter_count()));
    line("backend", c_.model_args().device + " " + r.m.model->weight_format());
    line("weights", mb((double)r.m.model->weight_bytes()));
    y++;
    double prefill = 0, decode = 0, ttft = 0;
    if (stream_.running) {
      std::lock_guard<std::mutex> lock(stream_.mu);
      if (stream_.tokens > 1) {
        double secs = std::chrono::duration<double>(Clock::now() - stream_.first_token).count();
        decode = secs > 0 ? (double)(stream_.tokens - 1) / secs : 0;
      }
      if (stream_.tokens > 0) ttft = std::chrono::duration<double, std::milli>(stream_.first_token - stream_.started).count();
    } else if (const GenerateResult* last = c_.last()) {
      prefill = last->prefill_tok_s();
      decode = last->decode_tok_s();
      ttft = last->prefill_seconds * 1e3;
    }
    auto rate = [](double v) { return v > 0 ? fmt::format("{:.1f} tok/s", v) : std::string("-"); };
    line("prefill", stream_.running ? "..." : rate(prefill));
    line("decode", rate(decode));
    line("first token", ttft > 0 ? fmt::format("{:.0f} ms", ttft) : "-");
    if (const GenerateResult* last = c_.last(); last && !stream_.running) {
      line("last prompt", fmt::format("{} ({} cached)", last->prompt_tokens, last->cached_tokens));
      line("last answer", fmt::format("{} tokens, {}", last->tokens.size(), last->context_full ? "context full" : last->finish_reason));
    }
    y++;
    int64_t cached = 0;
    size_t kv = 0;
    if (stream_.running) {  // the session is the generation thread's now: its last reading
      std::lock_guard<std::mutex> lock(stream_.mu);
      cached = stream_.cached, kv = stream_.kv_bytes;
    } else {
      cached = s.cached(), kv = s.kv_bytes();
    }
    line("context", fmt::format("{} / {}", cached, s.context_length()));
    line("KV cache", mb((double)kv));
    line("at full ctx", mb((double)s.kv_bytes_per_token() * (double)s.context_length()));
    line("RSS", mb((double)serve::rss_bytes()));
    line("threads", std::to_string(pool().size()));
    std::vector<Config> f = offered_configs(r.m, c_.model_args());
    // One line per device: "p cycles  f32 bf16 q8 q4", then "  then gpu  bf16 q8 q4".
    std::vector<std::pair<std::string, std::string>> per_device;
    for (const Config& x : f) {
      if (per_device.empty() || per_device.back().first != x.device) per_device.push_back({x.device, ""});
      per_device.back().second += (per_device.back().second.empty() ? "" : " ") + x.format;
    }
    y++;
    if (per_device.empty()) line("p cycles", "(gguf: as stored)");
    for (size_t i = 0; i < per_device.size(); i++)
      line(i == 0 ? "p cycles" : "  then " + per_device[i].first, per_device[i].second);
  }

  void draw_input() {
    int row = LINES - 2;
    mvhline(row - 1, 0, '-', COLS);
    // The status, then the newest line the process wrote to stderr (StderrToStatus).
    const std::string& status = status_ == kKeyHints[0] ? key_hints(COLS - 1) : status_;
    std::string shown = status + (status.empty() || note_.empty() ? "" : " · ") + note_;
    int used = 0;
    mvaddstr(LINES - 1, 0, shown.substr(0, cut_to_columns(shown, 0, COLS - 1, used)).c_str());
    std::string prompt = stream_.running ? "(answering: Esc stops) " : "> ";
    mvaddstr(row, 0, prompt.c_str());
    // The end of the line when it is longer than the screen.
    int room = COLS - (int)prompt.size() - 1;
    auto columns = [&](size_t from, size_t to) {
      int cols = 0;
      cut_to_columns(input_.substr(0, to), from, 1 << 30, cols);
      return cols;
    };
    size_t start = 0;
    while (columns(start, cursor_) > room) start = next_char(start);
    int before = columns(start, cursor_);
    mvaddstr(row, (int)prompt.size(), input_.substr(start, cut_to_columns(input_, start, room, used) - start).c_str());
    move(row, (int)prompt.size() + before);
    curs_set(dashboard_focus_ ? 0 : 1);
  }

  Conversation& c_;
  Stream stream_;
  std::thread worker_;
  OrderedJson shown_ = OrderedJson::array();
  std::string input_, pending_user_, status_, note_;
  size_t cursor_ = 0;
  int scroll_ = 0;
  bool dashboard_focus_ = false, quit_ = false;
};

}  // namespace

void add_tui(CLI::App& app) {
  auto* cmd = app.add_subcommand("tui", "full-screen chat with a live dashboard (speed, KV cache, memory); p switches "
                                 "the weight format in place");
  auto a = std::make_shared<ConversationArgs>();
  add_conversation_args(cmd, *a);
  cmd->callback([a] {
    if (!isatty(0) || !isatty(1)) fail("tui: needs a terminal (use kvad chat for pipes)");
    finish_conversation_args(*a, "tui");
    Conversation c(a->model, a->sampling, a->system, /*completion_ok=*/true);
    Tui(c).run();
  });
}

}  // namespace kvad::cli
