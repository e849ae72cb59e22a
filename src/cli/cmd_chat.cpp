// kvad chat: a multi-turn conversation in the terminal. Each turn re-renders the whole
// conversation with the chat template and reuses the longest prefix the session already holds,
// so only the new turn is prefilled (the stats line shows how many tokens were cached).
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "runtime/engine.h"
#include "cli/generation_io.h"
#include "core/error.h"

namespace kvad::cli {

namespace {

// Reads one line; returns false at end of input. A Ctrl-C at the prompt clears the line.
bool read_line(std::string& out, bool tty) {
  out.clear();
  char* buf = nullptr;
  size_t cap = 0;
  for (;;) {
    errno = 0;
    ssize_t n = getline(&buf, &cap, stdin);
    if (n >= 0) {
      out.assign(buf, (size_t)n);
      break;
    }
    if (errno == EINTR && g_interrupted) {
      g_interrupted = false;
      clearerr(stdin);
      if (tty) std::fprintf(stderr, "\n(/quit or Ctrl-D to leave)\n> ");
      continue;
    }
    std::free(buf);
    return false;
  }
  std::free(buf);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return true;
}

}  // namespace

void add_chat(CLI::App& app) {
  auto* cmd = app.add_subcommand("chat", "talk to a model (multi-turn, streaming, prefix reuse between turns)");
  struct Args {
    ModelArgs model;
    SamplingArgs sampling;
    std::string system;
  };
  auto a = std::make_shared<Args>();
  add_model_args(cmd, a->model, /*model_required=*/false);  // default: default_model()
  add_ctx_option(cmd, a->model.ctx);
  add_sampling_args(cmd, a->sampling);
  cmd->add_option("--system", a->system, "system message");
  cmd->callback([a] {
    finalize_sampling(a->sampling);
    const bool default_one = a->model.model.empty() && !std::getenv("KVAD_DEFAULT_MODEL");
    if (a->model.model.empty()) a->model.model = default_model();
    LoadedModel m = load_from_args(a->model);
    if (!m.chat_template && !m.chat_template_error.empty()) fail("{}", m.chat_template_error);
    if (!m.chat_template) fail("{}: the model has no chat template; use kvad run for plain completion", m.path);
    Engine engine(*m.model, engine_options(a->model));
    std::unique_ptr<Session> session = engine.open_session();
    bool tty = isatty(0);
    install_interrupt_handler();
    std::fprintf(stderr, "kvad chat: %s (%s, %.0fM parameters). /help /reset /stats /quit; Ctrl-C stops an answer.\n",
                 m.name.c_str(), m.model->config().architecture.c_str(), (double)m.model->parameter_count() / 1e6);
    if (default_one)
      std::fprintf(stderr, "The default model continues King James Bible text; it is not instruction-tuned and will not "
                   "answer questions. Give --model for a chat model.\n");
    OrderedJson history = OrderedJson::array();
    if (!a->system.empty()) history.push_back({{"role", "system"}, {"content", a->system}});
    GenerateResult last;
    bool have_last = false;
    uint64_t turn = 0;
    std::string line;
    for (;;) {
      if (tty) std::fprintf(stderr, "> ");
      if (!read_line(line, tty)) break;
      if (line.empty()) continue;
      if (line == "/quit" || line == "/exit") break;
      if (line == "/reset") {
        history = OrderedJson::array();
        if (!a->system.empty()) history.push_back({{"role", "system"}, {"content", a->system}});
        std::fprintf(stderr, "(conversation cleared)\n");
        continue;
      }
      if (line == "/stats") {
        if (have_last) std::fprintf(stderr, "%s\n", stats_line(last, a->sampling.p.seed).c_str());
        std::fprintf(stderr, "session holds %lld tokens, KV cache %.1f MB (%zu bytes per token), context %lld\n",
                     (long long)session->cached(), (double)session->kv_bytes() / 1e6, session->kv_bytes_per_token(),
                     (long long)session->context_length());
        continue;
      }
      if (line == "/help" || line == "/?") {
        std::fprintf(stderr, "/reset  forget the conversation\n/stats  the last answer's figures and the KV cache\n"
                     "/quit   leave (or Ctrl-D)\nCtrl-C stops an answer. A line starting with // sends one /.\n");
        continue;
      }
      if (line[0] == '/' && line.rfind("//", 0) != 0) {  // a command kvad does not have: never sent to the model
        std::fprintf(stderr, "unknown command %s (/help lists them; start with // to send a line beginning with /)\n",
                     line.substr(0, line.find(' ')).substr(0, 40).c_str());
        continue;
      }
      if (line.rfind("//", 0) == 0) line.erase(0, 1);
      history.push_back({{"role", "user"}, {"content", line}});
      std::vector<int32_t> prompt = chat_prompt(m, history);
      GenerateOptions g = generate_options(m, a->sampling);
      g.sampling.seed = a->sampling.p.seed + turn++;
      g_interrupted = false;
      GenerateResult r;
      try {
        r = generate(*session, *m.tokenizer, prompt, g, [&](const TokenEvent& ev) {
          std::fwrite(ev.text.data(), 1, ev.text.size(), stdout);
          std::fflush(stdout);
          return !g_interrupted.load();
        });
      } catch (const Error& e) {  // e.g. the conversation outgrew the context: say so, keep the REPL
        history.erase(history.size() - 1);
        std::fprintf(stderr, "error: %s (try /reset)\n", e.what());
        continue;
      }
      g_interrupted = false;
      std::printf("\n");
      std::fflush(stdout);
      history.push_back({{"role", "assistant"}, {"content", r.text}});
      std::fprintf(stderr, "[%s]\n", stats_line(r, g.sampling.seed).c_str());
      last = r;
      have_last = true;
    }
  });
}

}  // namespace kvad::cli
