// kvad run: one prompt in, streamed text out (stdout), a stats line on stderr.
//   kvad run [MODEL] [PROMPT...]   kvad run -m MODEL -p TEXT   kvad run -f FILE   echo TEXT | kvad run
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>

#include "runtime/engine.h"
#include "cli/generation_io.h"
#include "core/error.h"
#include "core/fs.h"

namespace kvad::cli {

static std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    std::string part = s.substr(i, j == std::string::npos ? std::string::npos : j - i);
    try {
      size_t used = 0;
      long long v = std::stoll(part, &used);
      if (used != part.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument("");
      ids.push_back((int32_t)v);
    } catch (const std::exception&) {
      fail("--prompt-tokens: '{}' is not a token id (expected e.g. 1,2,3)", part);
    }
    if (j == std::string::npos) break;
    i = j + 1;
  }
  return ids;
}

// Reads a whole prompt, refusing more than any context could hold rather than filling memory.
static std::string read_bounded(std::istream& in, const std::string& what) {
  constexpr size_t kMax = 64u << 20;
  std::string text;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, (size_t)in.gcount());
    if (text.size() > kMax) fail("{}: the prompt is over {} MiB", what, kMax >> 20);
  }
  return text;
}

// The prompt from exactly one place: --prompt, the words after the model, --file (- = stdin), or
// stdin when it is not a terminal and nothing else gave one.
static std::string gather_prompt(const std::string& flag, const std::vector<std::string>& words, const std::string& file) {
  int given = !flag.empty() + !words.empty() + !file.empty();
  if (given > 1) fail("run: give the prompt one way: --prompt, words after the model, or --file");
  if (!flag.empty()) return flag;
  std::string text;
  for (const std::string& w : words) text += (text.empty() ? "" : " ") + w;
  if (!words.empty()) return text;
  if (file == "-" || (file.empty() && !isatty(0))) {
    text = read_bounded(std::cin, "stdin");
  } else if (!file.empty()) {
    std::ifstream in(file, std::ios::binary);
    if (!in || is_directory(file)) fail("--file {}: cannot read it (no such file?)", file);
    text = read_bounded(in, "--file " + file);
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();  // as a shell's $(cat) does
  return text;
}

void add_run(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "generate text from a prompt");
  struct Args {
    ModelArgs model;
    SamplingArgs sampling;
    std::string prompt, prompt_tokens, system, file;
    std::vector<std::string> words;
    bool chat = false, json = false;
  };
  auto a = std::make_shared<Args>();
  add_model_args(cmd, a->model, /*model_required=*/false);  // default: default_model()
  add_ctx_option(cmd, a->model.ctx);
  add_spec_args(cmd, a->model.spec);
  add_sampling_args(cmd, a->sampling);
  cmd->add_option("words", a->words, "[MODEL] [PROMPT...]: a model (folder, .gguf, store name or ORG/NAME) and/or the "
                  "prompt; without a prompt, stdin is read when it is not a terminal");
  auto* p = cmd->add_option("-p,--prompt", a->prompt, "the prompt text");
  auto* f = cmd->add_option("-f,--file", a->file, "read the prompt from a file (- = stdin)");
  auto* pt = cmd->add_option("--prompt-tokens", a->prompt_tokens, "the prompt as token ids, e.g. 1,2,3");
  p->excludes(pt);
  f->excludes(pt);
  cmd->add_flag("--chat", a->chat, "wrap the prompt in the model's chat template as a user message");
  cmd->add_option("--system", a->system, "system message (with --chat)");
  cmd->add_flag("--json", a->json, "one JSON object per token, then a summary object");
  cmd->callback([a] {
    take_positional_model(a->model, a->words);
    if (a->prompt_tokens.empty()) {
      if (!a->words.empty() && !a->prompt.empty()) fail("run: '{}' is not a model; give the prompt one way", a->words[0].substr(0, 60));
      a->prompt = gather_prompt(a->prompt, a->words, a->file);
      if (a->prompt.empty())
        fail("run: no prompt: give one after the model (kvad run MODEL \"text\"), with -p, -f FILE or on stdin; "
             "`kvad chat` talks interactively");
    } else if (!a->words.empty()) {
      fail("run: --prompt-tokens is the prompt; '{}' is not a model", a->words[0].substr(0, 60));
    }
    finalize_sampling(a->sampling);
    if (a->model.model.empty()) a->model.model = default_model();
    LoadedModel m = load_from_args(a->model);
    std::vector<int32_t> prompt;
    if (!a->prompt_tokens.empty()) {
      prompt = parse_ids(a->prompt_tokens);
    } else if (a->chat) {
      OrderedJson msgs = OrderedJson::array();
      if (!a->system.empty()) msgs.push_back({{"role", "system"}, {"content", a->system}});
      msgs.push_back({{"role", "user"}, {"content", a->prompt}});
      prompt = chat_prompt(m, msgs);
    } else {
      prompt = m.tokenizer->encode(a->prompt, true, true);
    }
    Engine engine(*m.model, engine_options(a->model, m));
    release_host_weights_if_on_device(*m.model, engine);
    if (!engine.weights_note().empty()) std::fprintf(stderr, "kvad: %s\n", engine.weights_note().c_str());
    std::unique_ptr<Session> session = engine.open_session();
    install_interrupt_handler();
    GenerateOptions g = generate_options(m, a->sampling);
    g.speculative = load_speculative(a->model.spec, m, engine.context_length());
    GenerateResult r = generate(*session, *m.tokenizer, prompt, g,
                                [&](const TokenEvent& ev) {
                                  if (a->json) {
                                    Json j = {{"text", ev.text}};
                                    if (ev.id >= 0) j["id"] = ev.id;
                                    std::printf("%s\n", j.dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
                                  } else {
                                    std::fwrite(ev.text.data(), 1, ev.text.size(), stdout);
                                  }
                                  std::fflush(stdout);
                                  return !g_interrupted.load();
                                });
    if (a->json) {
      Json s = {{"prompt_tokens", r.prompt_tokens},   {"cached_tokens", r.cached_tokens},
                {"generated_tokens", r.tokens.size()}, {"prefill_tok_s", r.prefill_tok_s()},
                {"decode_tok_s", r.decode_tok_s()},    {"finish_reason", r.finish_reason}, {"context_full", r.context_full > 0},
                {"seed", a->sampling.p.seed}};
      if (g.speculative.enabled()) {
        s["draft_tokens"] = r.draft_tokens;
        s["draft_accepted"] = r.draft_accepted;
      }
      std::printf("%s\n", s.dump().c_str());
    } else {
      std::printf("\n");
    }
    std::fflush(stdout);
    std::fprintf(stderr, "%s\n", stats_line(r, a->sampling.p.seed).c_str());
  });
}

}  // namespace kvad::cli
