#include "cli/generation_io.h"

#include <csignal>
#include <cstring>

#include "core/error.h"

namespace kvad::cli {

std::atomic<bool> g_interrupted{false};

static void on_sigint(int) { g_interrupted = true; }

void install_interrupt_handler(int signal_number) {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocking read returns so the REPL can react
  sigaction(signal_number, &sa, nullptr);
}

GenerateOptions generate_options(const LoadedModel& m, const SamplingArgs& s) {
  GenerateOptions g;
  g.sampling = s.p;
  g.max_tokens = s.max_tokens;
  g.stop = s.stop;
  if (!s.ignore_eos) g.stop_ids = m.eos_ids;
  return g;
}

std::vector<int32_t> chat_prompt(const LoadedModel& m, const OrderedJson& messages) {
  if (!m.chat_template && !m.chat_template_error.empty()) fail("{}", m.chat_template_error);
  if (!m.chat_template)
    fail("{}: the model has no chat template (tokenizer_config.json 'chat_template'); run without --chat", m.path);
  std::string text = m.chat_template->render(messages, true, m.tokenizer->bos_token(), m.tokenizer->eos_token());
  return m.tokenizer->encode(text, /*parse_special=*/true, /*add_special=*/false);
}

std::string stats_line(const GenerateResult& r, uint64_t seed) {
  std::string why = r.context_full ? fmt::format("{} (the context of {} tokens is full)", r.finish_reason, r.context_full)
                                   : r.finish_reason;
  std::string drafts = r.draft_tokens > 0 ? fmt::format(" | drafts kept {}/{} ({:.0f}%)", r.draft_accepted, r.draft_tokens,
                                                         100.0 * (double)r.draft_accepted / (double)r.draft_tokens)
                                          : "";
  return fmt::format("prompt {} tokens ({} cached) | prefill {:.1f} tok/s | {} tokens, decode {:.1f} tok/s{} | {} | seed {}",
                     r.prompt_tokens, r.cached_tokens, r.prefill_tok_s(), r.tokens.size(), r.decode_tok_s(), drafts, why,
                     seed);
}

}  // namespace kvad::cli
