#include "train/data.h"

#include <algorithm>

#include "core/error.h"
#include "core/fs.h"
#include "core/rng.h"
#include "core/utf8.h"
#include "tokenizer/byte_level.h"

namespace kvad::train {

Corpus load_corpus(const std::string& path, bool all_bytes) {
  if (!file_exists(path)) fail("--data {}: no such file", path);
  if (is_directory(path)) fail("--data {}: is a folder; give a text file", path);
  std::string text = read_file(path);
  if (text.empty()) fail("--data {}: the file is empty", path);
  if (size_t nul = text.find('\0'); nul != std::string::npos)
    fail("--data {}: not a text file (a NUL byte at offset {}); kvad trains on UTF-8 text", path, nul);
  if (!is_valid_utf8(text))
    fail("--data {}: not UTF-8 text (convert it first, e.g. iconv -f latin1 -t utf-8)", path);
  int64_t control = 0;
  for (unsigned char ch : text) control += ch < 0x20 && ch != '\n' && ch != '\r' && ch != '\t';
  if (control * 10 > (int64_t)text.size())
    fail("--data {}: {} of {} bytes are control characters; this does not look like text", path, control, text.size());

  Corpus c;
  c.path = path;
  bool present[256] = {};
  for (unsigned char ch : text) present[ch] = true;
  c.id_of.fill(-1);
  for (int b = 0; b < 256; b++)
    if (all_bytes || present[b]) c.id_of[b] = (int32_t)c.vocab.size(), c.vocab.push_back((uint8_t)b);
  c.ids.resize(text.size());
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < text.size(); i++) {
    unsigned char ch = (unsigned char)text[i];
    c.ids[i] = c.id_of[ch];
    h = (h ^ ch) * 1099511628211ull;
  }
  c.hash = h;
  c.n_train = (int64_t)(0.9 * (double)c.ids.size());  // as the peer: int(0.9 * len)
  return c;
}

void check_corpus_fits(const Corpus& c, int64_t context) {
  if (c.n_train < context + 2 || c.n_val() < context + 1)
    fail("--data {}: {} bytes is too short for a context of {}: the 90% training part needs more than {} bytes "
         "and the 10% validation part at least {} (give more text or a smaller --context)",
         c.path, c.size(), context, context + 1, context + 1);
}

void sample_batch(const Corpus& c, uint64_t seed, int64_t step, int64_t B, int64_t T, int32_t* x, int32_t* y) {
  uint64_t s = seed ^ 0x5851f42d4c957f2dull;
  uint64_t mixed = Rng::splitmix(s) ^ (uint64_t)step;
  Rng rng(Rng::splitmix(mixed));
  uint64_t span = (uint64_t)(c.n_train - T - 1);  // as the peer: randint(len(train) - block - 1)
  for (int64_t b = 0; b < B; b++) {
    int64_t o = (int64_t)rng.below(span);
    std::copy(c.ids.begin() + o, c.ids.begin() + o + T, x + b * T);
    std::copy(c.ids.begin() + o + 1, c.ids.begin() + o + T + 1, y + b * T);
  }
}

int64_t val_windows(const Corpus& c, int64_t T) { return (c.n_val() - 1) / T; }

void val_window(const Corpus& c, int64_t w, int64_t T, int32_t* x, int32_t* y) {
  auto at = c.ids.begin() + c.n_train + w * T;
  std::copy(at, at + T, x);
  std::copy(at + 1, at + T + 1, y);
}

Json char_tokenizer_json(const std::vector<uint8_t>& vocab) {
  const tok::ByteLevelAlphabet& alphabet = tok::byte_level_alphabet();
  Json v = Json::object();
  std::string unk;
  for (size_t i = 0; i < vocab.size(); i++) {
    std::string piece = alphabet.encode(std::string(1, (char)vocab[i]));
    v[piece] = (int)i;
    if (vocab[i] == ' ') unk = piece;
  }
  if (unk.empty() && !vocab.empty()) unk = alphabet.encode(std::string(1, (char)vocab[0]));
  Json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}};
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", Json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", byte_level},
          {"post_processor", nullptr},
          {"decoder", byte_level},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", unk},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", true},
            {"byte_fallback", false},
            {"ignore_merges", false},
            {"vocab", v},
            {"merges", Json::array()}}}};
}

Json char_tokenizer_config(int64_t context) {
  return {{"tokenizer_class", "PreTrainedTokenizerFast"},
          {"model_max_length", context},
          {"clean_up_tokenization_spaces", false},
          {"chat_template", "{% for m in messages %}{% if loop.last %}{{ m['content'] }}{% endif %}{% endfor %}"}};
}

}  // namespace kvad::train
