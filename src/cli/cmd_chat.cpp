// kvad chat: a multi-turn conversation in the terminal. Each turn re-renders the whole
// conversation with the chat template and reuses the longest prefix the session already holds,
// so only the new turn is prefilled (the stats line shows how many tokens were cached). When the
// conversation outgrows the context, the oldest turns are dropped (the system message stays).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "cli/generation_io.h"
#include "cli/line_reader.h"
#include "core/error.h"
#include "core/fs.h"
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

// A model with its engine and session; members in this order so the session goes first.
struct Running {
  LoadedModel m;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Session> session;
};

std::unique_ptr<Running> start(const ModelArgs& args) {
  auto r = std::make_unique<Running>();
  r->m = load_from_args(args);
  if (!r->m.chat_template && !r->m.chat_template_error.empty()) fail("{}", r->m.chat_template_error);
  if (!r->m.chat_template) fail("{}: the model has no chat template; use kvad run for plain completion", r->m.path);
  r->engine = std::make_unique<Engine>(*r->m.model, engine_options(args));
  r->session = r->engine->open_session();
  return r;
}

class Chat {
 public:
  Chat(ModelArgs model, SamplingArgs sampling, std::string system)
      : args_(std::move(model)), sampling_(std::move(sampling)), system_(std::move(system)) {
    run_ = start(args_);
    reset();
  }

  void greet(bool default_model) const {
    const LoadedModel& m = run_->m;
    std::fprintf(stderr, "kvad chat: %s (%s, %.0fM parameters, context %lld). /help for commands; Ctrl-C stops an answer.\n",
                 m.name.c_str(), m.model->config().architecture.c_str(), (double)m.model->parameter_count() / 1e6,
                 (long long)run_->session->context_length());
    if (default_model)
      std::fprintf(stderr, "The default model continues King James Bible text; it is not instruction-tuned and will not "
                   "answer questions. Give a chat model: kvad chat MODEL.\n");
  }

  // Returns false to leave.
  bool command(const std::string& line) {
    std::string name = line.substr(0, line.find(' '));
    std::string rest = line.size() > name.size() ? line.substr(name.size() + 1) : "";
    if (name == "/quit" || name == "/exit" || name == "/bye") return false;
    if (name == "/help" || name == "/?") {
      std::fputs(kHelp, stderr);
    } else if (name == "/reset" || name == "/clear") {
      reset();
      std::fprintf(stderr, "(conversation cleared)\n");
    } else if (name == "/stats") {
      stats();
    } else if (name == "/set") {
      set(rest);
    } else if (name == "/save") {
      save(rest);
    } else if (name == "/load") {
      load(rest);
    } else {  // a command kvad does not have: never sent to the model
      std::fprintf(stderr, "unknown command %s (/help lists them; start with // to send a line beginning with /)\n",
                   name.substr(0, 40).c_str());
    }
    return true;
  }

  void say(const std::string& text, bool tty) {
    history_.push_back({{"role", "user"}, {"content", text}});
    std::vector<int32_t> prompt;
    try {
      prompt = fit_context();
    } catch (const Error& e) {
      history_.erase(history_.size() - 1);
      std::fprintf(stderr, "error: %s\n", e.what());
      return;
    }
    GenerateOptions g = generate_options(run_->m, sampling_);
    g.sampling.seed = sampling_.p.seed + turn_++;
    g_interrupted = false;
    GenerateResult r;
    try {
      QuietKeyboard quiet(tty);
      r = generate(*run_->session, *run_->m.tokenizer, prompt, g, [&](const TokenEvent& ev) {
        std::fwrite(ev.text.data(), 1, ev.text.size(), stdout);
        std::fflush(stdout);
        return !g_interrupted.load();
      });
    } catch (const Error& e) {
      history_.erase(history_.size() - 1);
      std::fprintf(stderr, "\nerror: %s (try /reset)\n", e.what());
      return;
    }
    g_interrupted = false;
    std::printf("\n");
    std::fflush(stdout);
    history_.push_back({{"role", "assistant"}, {"content", r.text}});
    std::fprintf(stderr, "[%s]\n", stats_line(r, g.sampling.seed).c_str());
    last_ = r;
    last_seed_ = g.sampling.seed;
    have_last_ = true;
  }

 private:
  void reset() {
    history_ = OrderedJson::array();
    if (!system_.empty()) history_.push_back({{"role", "system"}, {"content", system_}});
  }

  // The prompt for the conversation. When it and the answer's room (max_tokens, at most half the
  // context) do not fit, the oldest turns go until the conversation fills at most half of what is
  // left: dropping a batch at once lets the next turns reuse the new prefix instead of each turn
  // dropping one more message and prefilling everything again.
  std::vector<int32_t> fit_context() {
    int64_t ctx = run_->session->context_length();
    int64_t limit = ctx - std::min<int64_t>(sampling_.max_tokens, ctx / 2);
    std::vector<int32_t> prompt = chat_prompt(run_->m, history_);
    if ((int64_t)prompt.size() <= limit) return prompt;
    size_t first = (!history_.empty() && history_[0]["role"] == "system") ? 1 : 0;
    size_t dropped = 0;
    while ((int64_t)prompt.size() > limit / 2 && history_.size() > first + 1) {
      history_.erase(first);  // then on to the next user message: a turn never starts with an answer
      dropped++;
      while (history_.size() > first + 1 && history_[first]["role"] != "user") history_.erase(first), dropped++;
      prompt = chat_prompt(run_->m, history_);
    }
    if (dropped)
      std::fprintf(stderr, "(the conversation outgrew the context of %lld tokens: dropped the %zu oldest messages%s)\n",
                   (long long)ctx, dropped, first ? "; the system message is kept" : "");
    if ((int64_t)prompt.size() > limit)
      fail("this message is {} tokens with the system message; with room for the answer ({} tokens) that is more than "
           "the context of {} (/set max_tokens, or -c for a longer context)", prompt.size(), ctx - limit, ctx);
    return prompt;
  }

  void stats() const {
    if (have_last_) std::fprintf(stderr, "%s\n", stats_line(last_, last_seed_).c_str());
    const Session& s = *run_->session;
    std::fprintf(stderr, "conversation %zu messages; session holds %lld tokens, KV cache %.1f MB (%zu bytes per token), "
                 "context %lld\n", history_.size(), (long long)s.cached(), (double)s.kv_bytes() / 1e6,
                 s.kv_bytes_per_token(), (long long)s.context_length());
  }

  void set(const std::string& rest) {
    SamplingParams& p = sampling_.p;
    if (rest.empty()) {
      std::fprintf(stderr, "temperature %g  top_k %d  top_p %g  min_p %g  repeat_penalty %g  presence_penalty %g  "
                   "frequency_penalty %g  seed %llu  max_tokens %lld\nsystem: %s\n", p.temperature, p.top_k, p.top_p,
                   p.min_p, p.repetition_penalty, p.presence_penalty, p.frequency_penalty, (unsigned long long)p.seed,
                   (long long)sampling_.max_tokens, system_.empty() ? "(none)" : system_.c_str());
      return;
    }
    std::string key = rest.substr(0, rest.find(' '));
    std::string value = rest.size() > key.size() ? rest.substr(key.size() + 1) : "";
    if (key == "system") {
      system_ = value;
      if (!history_.empty() && history_[0]["role"] == "system") history_.erase(0);
      if (!system_.empty()) history_.insert(history_.begin(), OrderedJson{{"role", "system"}, {"content", system_}});
      std::fprintf(stderr, "(system message %s)\n", system_.empty() ? "removed" : "set");
      return;
    }
    SamplingArgs before = sampling_;
    try {
      size_t used = 0;
      double v = std::stod(value, &used);
      if (used != value.size()) throw std::invalid_argument("");
      auto whole = [&] {
        if (v != (double)(int64_t)v) throw std::invalid_argument("");
        return (int64_t)v;
      };
      if (key == "temperature" || key == "temp") p.temperature = (float)v;
      else if (key == "top_k") p.top_k = (int)whole();
      else if (key == "top_p") p.top_p = (float)v;
      else if (key == "min_p") p.min_p = (float)v;
      else if (key == "repeat_penalty" || key == "repetition_penalty") p.repetition_penalty = (float)v;
      else if (key == "presence_penalty") p.presence_penalty = (float)v;
      else if (key == "frequency_penalty") p.frequency_penalty = (float)v;
      else if (key == "seed") p.seed = (uint64_t)whole(), turn_ = 0;
      else if (key == "max_tokens" || key == "num_predict") {
        if (whole() < 1) fail("max_tokens must be at least 1");
        sampling_.max_tokens = whole();
      } else {
        std::fprintf(stderr, "unknown setting '%s' (/set lists them)\n", key.substr(0, 40).c_str());
        return;
      }
      validate(p);
      std::fprintf(stderr, "(%s = %s)\n", key.c_str(), value.c_str());
    } catch (const Error& e) {
      sampling_ = before;
      std::fprintf(stderr, "error: %s\n", e.what());
    } catch (const std::exception&) {
      sampling_ = before;
      std::fprintf(stderr, "error: /set %s: '%s' is not a %s\n", key.c_str(), value.substr(0, 40).c_str(),
                   key == "top_k" || key == "seed" || key == "max_tokens" ? "whole number" : "number");
    }
  }

  void save(const std::string& file) {
    if (file.empty()) return (void)std::fprintf(stderr, "usage: /save FILE\n");
    OrderedJson doc = {{"model", run_->m.name}, {"messages", history_}};
    try {
      atomic_write_file(file, doc.dump(2) + "\n");
      std::fprintf(stderr, "(saved %zu messages to %s; /load %s brings them back)\n", history_.size(), file.c_str(),
                   file.c_str());
    } catch (const Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
    }
  }

  // /load FILE.json: a conversation saved by /save. /load MODEL: another model, same conversation.
  void load(const std::string& what) {
    if (what.empty()) return (void)std::fprintf(stderr, "usage: /load MODEL or /load FILE.json\n");
    try {
      if (what.size() > 5 && what.compare(what.size() - 5, 5, ".json") == 0 && file_exists(what)) {
        OrderedJson doc = parse_ordered_json(read_file(what), what);
        const OrderedJson* msgs = doc.is_object() && doc.contains("messages") ? &doc["messages"] : nullptr;
        if (!msgs || !msgs->is_array()) fail("{}: not a conversation saved by /save (no 'messages' list)", what);
        for (const OrderedJson& msg : *msgs)
          if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string() || !msg.contains("content") ||
              !msg["content"].is_string())
            fail("{}: every message needs a string 'role' and 'content'", what);
        history_ = *msgs;
        system_ = !history_.empty() && history_[0]["role"] == "system" ? history_[0]["content"].get<std::string>() : "";
        std::fprintf(stderr, "(loaded %zu messages from %s)\n", history_.size(), what.c_str());
        return;
      }
      ModelArgs next = args_;
      next.model = what;
      std::unique_ptr<Running> fresh = start(next);
      run_ = std::move(fresh);  // only once the new one loaded: a failed /load keeps the old model
      args_ = next;
      greet(false);
    } catch (const Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
    }
  }

  ModelArgs args_;
  SamplingArgs sampling_;
  std::string system_;
  std::unique_ptr<Running> run_;
  OrderedJson history_ = OrderedJson::array();
  GenerateResult last_;
  uint64_t last_seed_ = 0;
  bool have_last_ = false;
  uint64_t turn_ = 0;
};

}  // namespace

void add_chat(CLI::App& app) {
  auto* cmd = app.add_subcommand("chat", "talk to a model (multi-turn, streaming, prefix reuse between turns)");
  struct Args {
    ModelArgs model;
    SamplingArgs sampling;
    std::string system;
    std::vector<std::string> words;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("words", a->words, "[MODEL]: a folder, .gguf, store name or ORG/NAME (or -m)")->expected(0, 1);
  add_model_args(cmd, a->model, /*model_required=*/false);  // default: default_model()
  add_ctx_option(cmd, a->model.ctx);
  add_sampling_args(cmd, a->sampling);
  cmd->add_option("--system", a->system, "system message");
  cmd->callback([a] {
    take_positional_model(a->model, a->words);
    if (!a->words.empty()) fail("chat: '{}' is not a model (a folder, .gguf, store name or ORG/NAME)", a->words[0].substr(0, 60));
    finalize_sampling(a->sampling);
    const bool default_one = a->model.model.empty() && !std::getenv("KVAD_DEFAULT_MODEL");
    if (a->model.model.empty()) a->model.model = default_model();
    Chat chat(a->model, a->sampling, a->system);
    bool tty = isatty(0) && isatty(2);
    install_interrupt_handler();
    chat.greet(default_one);
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
        if (!chat.command(line)) break;
        continue;
      }
      if (line.rfind("//", 0) == 0) line.erase(0, 1);
      chat.say(line, tty);
    }
  });
}

}  // namespace kvad::cli
