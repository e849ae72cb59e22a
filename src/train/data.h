// The training text: a character-level vocabulary (the distinct bytes of the corpus, sorted, as
// the PyTorch peer builds it), the 90/10 train/validation split, random training windows and the
// validation windows, and the tokenizer.json that makes kvad's engine tokenizer produce the same ids.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"
#include "core/rng.h"

namespace kvad::train {

struct Corpus {
  std::string path;
  std::vector<uint8_t> vocab;        // id -> byte
  std::array<int32_t, 256> id_of{};  // byte -> id (-1 when not in the vocabulary)
  std::vector<int32_t> ids;          // the whole text as ids
  int64_t n_train = 0;               // ids[0, n_train) train, the rest validation
  uint64_t hash = 0;                 // FNV-1a of the bytes: a resumed run checks it has the same text

  int64_t size() const { return (int64_t)ids.size(); }
  int64_t n_val() const { return size() - n_train; }
};

// Reads and checks a corpus: it must exist, be non-empty UTF-8 text (no NUL bytes, not mostly
// control characters). all_bytes: the vocabulary is all 256 byte values instead of those present.
Corpus load_corpus(const std::string& path, bool all_bytes);
// Fails unless both parts hold more than one context window (+1 for the shifted targets).
void check_corpus_fits(const Corpus& c, int64_t context);

// The training batch of a step: B windows at uniform random offsets in the train part (offsets
// drawn from a generator seeded by (seed, step), so any step's batch can be made again — that
// is what lets a resumed run continue the same curve). x, y: [B*T], y = x shifted by one.
void sample_batch(const Corpus& c, uint64_t seed, int64_t step, int64_t B, int64_t T, int32_t* x, int32_t* y);
// Validation: non-overlapping T-long windows of the validation part (as the peer scores it).
int64_t val_windows(const Corpus& c, int64_t T);
void val_window(const Corpus& c, int64_t w, int64_t T, int32_t* x, int32_t* y);

// ---- the pieces shared with token_data.cpp (the same checks and batches for a base model's tokens)

// The text of a --data file, checked: it exists, is a file, is not empty, has no NUL byte, is
// UTF-8 and is not mostly control characters. Errors say `--data PATH: why`.
std::string read_training_text(const std::string& path);
// FNV-1a (64-bit) of bytes, continuing from h: the hash a resumed run compares.
constexpr uint64_t kFnv1aBasis = 1469598103934665603ull;
uint64_t fnv1a(std::string_view bytes, uint64_t h = kFnv1aBasis);
// Fails unless a text of n units (bytes, tokens) split at n_train leaves more than one context
// window (+1 for the shifted targets) in the training part and one in the validation part.
void check_split_fits(const std::string& path, int64_t n, int64_t n_train, int64_t context, const char* unit);
// The generator of step `step`'s batch, seeded by (seed, step) only.
Rng batch_rng(uint64_t seed, int64_t step);
// B windows of T+1 ids at uniform random offsets in ids[0, n) (drawn from batch_rng(seed, step)):
// x = window[0, T), y = window[1, T], each [B*T].
void sample_windows(const int32_t* ids, int64_t n, uint64_t seed, int64_t step, int64_t B, int64_t T, int32_t* x,
                    int32_t* y);

// tokenizer.json for a byte vocabulary: byte-level BPE without merges, ByteLevel pre-tokenizer
// without the regex, so each byte is its own token. A byte outside the vocabulary becomes the
// space token (the unk token; a run of them becomes one), or the first token if there is no space.
Json char_tokenizer_json(const std::vector<uint8_t>& vocab);
// tokenizer_config.json: the context as model_max_length, and a chat template that hands the
// model the last message as a prompt to continue (a character model has no turns).
Json char_tokenizer_config(int64_t context);

}  // namespace kvad::train
