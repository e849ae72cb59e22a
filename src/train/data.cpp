#include "train/data.h"

#include <algorithm>

#include "core/error.h"
#include "core/fs.h"
#include "core/utf8.h"
#include "tokenizer/byte_level.h"

namespace kvad::train {

std::string read_training_text(const std::string& path) {
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
  return text;
}

uint64_t fnv1a(std::string_view bytes, uint64_t h) {
  for (unsigned char ch : bytes) h = (h ^ ch) * 1099511628211ull;
  return h;
}

Corpus load_corpus(const std::string& path, bool all_bytes) {
  std::string text = read_training_text(path);
  Corpus c;
  c.path = path;
  bool present[256] = {};
  for (unsigned char ch : text) present[ch] = true;
  c.id_of.fill(-1);
  for (int b = 0; b < 256; b++)
    if (all_bytes || present[b]) c.id_of[b] = (int32_t)c.vocab.size(), c.vocab.push_back((uint8_t)b);
  c.ids.resize(text.size());
  for (size_t i = 0; i < text.size(); i++) c.ids[i] = c.id_of[(unsigned char)text[i]];
  c.hash = fnv1a(text);
  c.n_train = (int64_t)(0.9 * (double)c.ids.size());  // as the peer: int(0.9 * len)
  return c;
}

void check_split_fits(const std::string& path, int64_t n, int64_t n_train, int64_t context, const char* unit) {
  if (n_train < context + 2 || n - n_train < context + 1)
    fail("--data {}: {} {} is too short for a context of {}: the 90% training part needs more than {} {} "
         "and the 10% validation part at least {} (give more text or a smaller --context)",
         path, n, unit, context, context + 1, unit, context + 1);
}

void check_corpus_fits(const Corpus& c, int64_t context) { check_split_fits(c.path, c.size(), c.n_train, context, "bytes"); }

Rng batch_rng(uint64_t seed, int64_t step) {
  uint64_t s = seed ^ 0x5851f42d4c957f2dull;
  uint64_t mixed = Rng::splitmix(s) ^ (uint64_t)step;
  return Rng(Rng::splitmix(mixed));
}

void sample_windows(const int32_t* ids, int64_t n, uint64_t seed, int64_t step, int64_t B, int64_t T, int32_t* x,
                    int32_t* y) {
  Rng rng = batch_rng(seed, step);
  uint64_t span = (uint64_t)(n - T - 1);  // as the peer: randint(len(train) - block - 1)
  for (int64_t b = 0; b < B; b++) {
    int64_t o = (int64_t)rng.below(span);
    std::copy(ids + o, ids + o + T, x + b * T);
    std::copy(ids + o + 1, ids + o + T + 1, y + b * T);
  }
}

void sample_batch(const Corpus& c, uint64_t seed, int64_t step, int64_t B, int64_t T, int32_t* x, int32_t* y) {
  sample_windows(c.ids.data(), c.n_train, seed, step, B, T, x, y);
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
