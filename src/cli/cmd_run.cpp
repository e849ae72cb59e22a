// kvad run: one prompt in, streamed text out (stdout), a stats line on stderr.
#include <cstdio>

#include "runtime/engine.h"
#include "cli/generation_io.h"
#include "core/error.h"

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

void add_run(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "generate text from a prompt");
  struct Args {
    ModelArgs model;
    SamplingArgs sampling;
    std::string prompt, prompt_tokens, system;
    bool chat = false, json = false;
  };
  auto a = std::make_shared<Args>();
  add_model_args(cmd, a->model, /*model_required=*/false);  // default: default_model()
  add_ctx_option(cmd, a->model.ctx);
  add_sampling_args(cmd, a->sampling);
  auto* p = cmd->add_option("-p,--prompt", a->prompt, "the prompt text");
  auto* pt = cmd->add_option("--prompt-tokens", a->prompt_tokens, "the prompt as token ids, e.g. 1,2,3");
  p->excludes(pt);
  cmd->add_flag("--chat", a->chat, "wrap the prompt in the model's chat template as a user message");
  cmd->add_option("--system", a->system, "system message (with --chat)");
  cmd->add_flag("--json", a->json, "one JSON object per token, then a summary object");
  cmd->callback([a] {
    if (a->prompt.empty() && a->prompt_tokens.empty()) fail("run: give --prompt TEXT or --prompt-tokens IDS");
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
    Engine engine(*m.model, engine_options(a->model));
    std::unique_ptr<Session> session = engine.open_session();
    install_interrupt_handler();
    GenerateResult r = generate(*session, *m.tokenizer, prompt, generate_options(m, a->sampling),
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
      std::printf("%s\n", s.dump().c_str());
    } else {
      std::printf("\n");
    }
    std::fflush(stdout);
    std::fprintf(stderr, "%s\n", stats_line(r, a->sampling.p.seed).c_str());
  });
}

}  // namespace kvad::cli
