// kvad score: how well a model predicts a text, as perplexity (per token) and bits per character,
// by runtime/score.h's one definition (the server's scoring page uses the same): disjoint windows
// of the context, each starting fresh as `kvad train` scores its validation part, so `--split val`
// on the training corpus reproduces the trainer's val_bpc.
#include <cmath>
#include <cstdio>

#include "cli/common.h"
#include "runtime/score.h"
#include "core/error.h"
#include "core/fs.h"

namespace kvad::cli {

void add_score(CLI::App& app) {
  auto* cmd = app.add_subcommand("score", "perplexity and bits per character of a model on a text file");
  struct Args {
    ModelArgs model;
    std::string data, split = "all";
    int64_t context = 0, max_chars = 0;
    bool json = false;
    std::string kl_vs_kv;
  };
  auto a = std::make_shared<Args>();
  add_model_args(cmd, a->model);
  cmd->add_option("--data", a->data, "the text to score")->required();
  cmd->add_option("--split", a->split, "all (default) or val: the last 10%, the part kvad train holds out")
      ->check(CLI::IsMember({"all", "val"}));
  add_ctx_option(cmd, a->context, "window length in tokens (default: the model's context)", "-c,--ctx,--context");
  cmd->add_option("--max-chars", a->max_chars, "score at most this many bytes of the text (default: all)")->check(CLI::NonNegativeNumber);
  cmd->add_flag("--json", a->json, "print one JSON object");
  cmd->add_option("--kl-vs-kv", a->kl_vs_kv, "also run the text with this KV cache type (f32, bf16, q8) and report the "
                  "KL divergence of --kv-type's next-token distributions from it, and how often the top token agrees")
      ->check(CLI::IsMember({"f32", "bf16", "q8"}));
  cmd->callback([a] {
    if (!file_exists(a->data) || is_directory(a->data)) fail("--data {}: no such file", a->data);
    std::string text = read_file(a->data);
    if (a->split == "val") text = text.substr((size_t)(0.9 * (double)text.size()));  // as kvad train splits
    if (a->max_chars > 0 && (int64_t)text.size() > a->max_chars) text.resize((size_t)a->max_chars);
    LoadedModel m = load_from_args(a->model);
    int64_t T = a->context ? a->context : m.model->context_length();
    if (T > m.model->context_length())
      fail("--ctx {} is longer than the model's context of {}", T, m.model->context_length());
    EngineOptions eo = engine_options(a->model, m);
    eo.ctx = T;
    Engine engine(*m.model, eo);
    std::unique_ptr<Engine> reference;
    if (!a->kl_vs_kv.empty()) {
      EngineOptions ro = eo;
      ro.kv_type = kernels::parse_kv_type(a->kl_vs_kv);
      reference = std::make_unique<Engine>(*m.model, ro);
    }
    ScoreResult r = score_text(engine, *m.tokenizer, text, T, {}, reference.get());
    int64_t tokens = r.predicted, bytes = r.chars;
    double ppl = r.perplexity(), bpc = r.bits_per_char(), nll = r.nll;
    if (a->json) {
      Json j = {{"model", m.path},  {"tokens", tokens},         {"chars", bytes}, {"bytes", r.bytes}, {"loss", nll / (double)tokens},
                {"perplexity", ppl}, {"bits_per_char", bpc},     {"context", T},   {"split", a->split},
                {"kv_type", kernels::kv_type_name(eo.kv_type)}};
      if (const auto& d = r.vs_reference)
        j["vs_kv"] = {{"kv_type", a->kl_vs_kv}, {"kl_mean", d->kl_mean}, {"kl_p99", d->kl_p99},
                      {"kl_max", d->kl_max}, {"same_top", d->same_top}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("%s on %s (%s): perplexity %.4f per token, %.4f bits per character (%lld tokens, %lld chars, "
                  "windows of %lld)\n",
                  m.name.c_str(), a->data.c_str(), a->split.c_str(), ppl, bpc, (long long)tokens, (long long)bytes,
                  (long long)T);
      if (const auto& d = r.vs_reference)
        std::printf("KV %s against %s: KL divergence mean %.3g, p99 %.3g, max %.3g nats per token; same top token %.2f%%\n",
                    kernels::kv_type_name(eo.kv_type), a->kl_vs_kv.c_str(), d->kl_mean, d->kl_p99, d->kl_max, 100 * d->same_top);
    }
  });
}

}  // namespace kvad::cli
