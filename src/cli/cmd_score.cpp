// kvad score: how well a model predicts a text, as perplexity (per token) and bits per character
// (per byte of the text). The text is cut into non-overlapping windows of the model's context
// (each window starts fresh, as `kvad train` scores its validation part), so `--split val` on the
// training corpus reproduces the trainer's val_bpc.
#include <cmath>
#include <cstdio>

#include "cli/common.h"
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
  };
  auto a = std::make_shared<Args>();
  add_model_args(cmd, a->model);
  cmd->add_option("--data", a->data, "the text to score")->required();
  cmd->add_option("--split", a->split, "all (default) or val: the last 10%, the part kvad train holds out")
      ->check(CLI::IsMember({"all", "val"}));
  cmd->add_option("--context", a->context, "window length in tokens (default: the model's context)")->check(CLI::Range(2, 1 << 20));
  cmd->add_option("--max-chars", a->max_chars, "score at most this many bytes of the text (default: all)")->check(CLI::NonNegativeNumber);
  cmd->add_flag("--json", a->json, "print one JSON object");
  cmd->callback([a] {
    if (!file_exists(a->data) || is_directory(a->data)) fail("--data {}: no such file", a->data);
    std::string text = read_file(a->data);
    if (a->split == "val") text = text.substr((size_t)(0.9 * (double)text.size()));  // as kvad train splits
    if (a->max_chars > 0 && (int64_t)text.size() > a->max_chars) text.resize((size_t)a->max_chars);
    LoadedModel m = load_from_args(a->model);
    std::vector<int32_t> ids = m.tokenizer->encode(text, /*parse_special=*/false, /*add_special=*/false);
    int64_t T = a->context ? a->context : m.model->context_length();
    if (T > m.model->context_length())
      fail("--context {} is longer than the model's context of {}", T, m.model->context_length());
    int64_t windows = ((int64_t)ids.size() - 1) / T;
    if (windows < 1)
      fail("--data {}: {} tokens is shorter than one window of {} + 1 tokens", a->data, ids.size(), T);
    const int64_t V = m.model->config().vocab_size;
    std::vector<float> logits((size_t)(T * V));
    double nll = 0;
    int64_t bytes = 0;
    for (int64_t w = 0; w < windows; w++) {
      const int32_t* x = ids.data() + w * T;
      auto state = m.model->new_state();
      m.model->forward(x, T, *state, logits.data(), /*all_positions=*/true);
      for (int64_t t = 0; t < T; t++) {
        const float* l = &logits[(size_t)(t * V)];
        double mx = l[0], z = 0;
        for (int64_t j = 1; j < V; j++) mx = std::max(mx, (double)l[j]);
        for (int64_t j = 0; j < V; j++) z += std::exp((double)l[j] - mx);
        int32_t next = x[t + 1];
        nll += mx + std::log(z) - (double)l[next];
        bytes += (int64_t)m.tokenizer->token_bytes(next).size();
      }
    }
    int64_t tokens = windows * T;
    double ppl = std::exp(nll / (double)tokens), bpc = nll / std::log(2.0) / (double)bytes;
    if (a->json) {
      Json j = {{"model", m.path},  {"tokens", tokens},         {"chars", bytes}, {"loss", nll / (double)tokens},
                {"perplexity", ppl}, {"bits_per_char", bpc},     {"context", T},   {"split", a->split}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("%s on %s (%s): perplexity %.4f per token, %.4f bits per character (%lld tokens, %lld chars, "
                  "windows of %lld)\n",
                  m.name.c_str(), a->data.c_str(), a->split.c_str(), ppl, bpc, (long long)tokens, (long long)bytes,
                  (long long)T);
    }
  });
}

}  // namespace kvad::cli
