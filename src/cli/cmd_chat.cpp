// kvad chat: a multi-turn conversation in the terminal. Each turn re-renders the whole
// conversation with the chat template and reuses the longest prefix the session already holds,
// so only the new turn is prefilled (the stats line shows how many tokens were cached). The
// conversation's rules (the context filling up, /set, /save, /load) are cli/conversation.h's.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "cli/conversation.h"
#include "cli/generation_io.h"
#include "cli/line_reader.h"
#include "core/error.h"
#include "runtime/engine.h"

namespace kvad::cli {

namespace {

const char* kHelp =
    "/set                 show the settings\n"
    "/set NAME VALUE      temperature, top_k, top_p, min_p, repeat_penalty, presence_penalty,\n"
    "                     frequency_penalty, seed, max_tokens; /set system TEXT replaces the system message\n"
    "/load MODEL          switch model, keeping the conversation (/load FILE.json: a saved conversation)\n"
    "/save FILE           save the conversation as JSON\n"
    "/stats               the last answer's figures and the KV cache\n"
    "/reset               forget the conversation\n"
    "/quit                leave (or Ctrl-D)\n"
    "Ctrl-C stops an answer. End a line with \\ to go on, or put \"\"\" on a line to open and close a block.\n"
    "A line starting with // sends one /.\n";

void greet(const Conversation& c, bool default_model) {
  const RunningModel& r = c.running();
  std::fprintf(stderr, "kvad chat: %s (%s, %.0fM parameters, context %lld). /help for commands; Ctrl-C stops an answer.\n",
               r.m.name.c_str(), r.m.model->config().architecture.c_str(), (double)r.m.model->parameter_count() / 1e6,
               (long long)r.session->context_length());
  if (default_model)
    std::fprintf(stderr, "The default model continues King James Bible text; it is not instruction-tuned and will not "
                 "answer questions. Give a chat model: kvad chat MODEL.\n");
}

void stats(const Conversation& c) {
  if (const GenerateResult* last = c.last()) std::fprintf(stderr, "%s\n", stats_line(*last, c.last_seed()).c_str());
  const Session& s = *c.running().session;
  std::fprintf(stderr, "conversation %zu messages; session holds %lld tokens, KV cache %.1f MB (%zu bytes per token), "
               "context %lld\n", c.messages().size(), (long long)s.cached(), (double)s.kv_bytes() / 1e6,
               s.kv_bytes_per_token(), (long long)s.context_length());
}

void say_line(const std::string& text) {
  if (!text.empty()) std::fprintf(stderr, "%s\n", text.c_str());
}

// Returns false to leave.
bool command(Conversation& c, const std::string& line) {
  std::string name = line.substr(0, line.find(' '));
  std::string rest = line.size() > name.size() ? line.substr(name.size() + 1) : "";
  if (name == "/quit" || name == "/exit" || name == "/bye") return false;
  try {
    if (name == "/help" || name == "/?") std::fputs(kHelp, stderr);
    else if (name == "/reset" || name == "/clear") c.reset(), say_line("(conversation cleared)");
    else if (name == "/stats") stats(c);
    else if (name == "/set") say_line(c.set(rest));
    else if (name == "/save") say_line(c.save(rest));
    else if (name == "/load") {
      std::string said = c.load(rest);
      if (said.empty()) greet(c, false);  // another model
      say_line(said);
    } else  // a command kvad does not have: never sent to the model
      std::fprintf(stderr, "unknown command %s (/help lists them; start with // to send a line beginning with /)\n",
                   name.substr(0, 40).c_str());
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  }
  return true;
}

void say(Conversation& c, const std::string& text, bool tty) {
  g_interrupted = false;
  std::string notice;
  GenerateResult r;
  try {
    QuietKeyboard quiet(tty);
    r = c.say(text, [](const std::string& piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      return !g_interrupted.load();
    }, notice);
  } catch (const Error& e) {
    say_line(notice);
    std::fprintf(stderr, "\nerror: %s (try /reset)\n", e.what());
    return;
  }
  g_interrupted = false;
  std::printf("\n");
  std::fflush(stdout);
  say_line(notice);
  std::fprintf(stderr, "[%s]\n", stats_line(r, c.last_seed()).c_str());
}

}  // namespace

void add_chat(CLI::App& app) {
  auto* cmd = app.add_subcommand("chat", "talk to a model (multi-turn, streaming, prefix reuse between turns)");
  auto a = std::make_shared<ConversationArgs>();
  add_conversation_args(cmd, *a);
  cmd->callback([a] {
    finish_conversation_args(*a, "chat");
    Conversation chat(a->model, a->sampling, a->system);
    bool tty = isatty(0) && isatty(2);
    install_interrupt_handler();
    greet(chat, a->default_model);
    LineReader reader(tty, chat_history_path());
    std::string line;
    bool interrupted = false;
    while (reader.read_message(line, interrupted)) {
      if (interrupted) {
        std::fprintf(stderr, "(/quit or Ctrl-D to leave)\n");
        continue;
      }
      if (line.empty()) continue;
      if (line[0] == '/' && line.rfind("//", 0) != 0) {
        if (!command(chat, line)) break;
        continue;
      }
      if (line.rfind("//", 0) == 0) line.erase(0, 1);
      say(chat, line, tty);
    }
  });
}

}  // namespace kvad::cli
