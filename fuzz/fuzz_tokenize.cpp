// libFuzzer: arbitrary text (any bytes, invalid UTF-8 included) encoded by real tokenizers (GPT-2
// and Qwen3's, with their pre-tokenizer regexes, NFC normaliser and special tokens; Llama 2's
// SentencePiece-style BPE with byte fallback; the Unigram fixture), with and without special-token
// parsing; decode(encode(x)) must give back valid UTF-8 x for GPT-2, and for Llama 2 when x has no
// "▁" (its decoder turns a written one into a space).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>

#include "core/error.h"
#include "core/utf8.h"
#include "tokenizer/tokenizer.h"

namespace {
const kvad::Tokenizer& tok(const char* fam) {
  static std::map<std::string, kvad::Tokenizer>* cache = new std::map<std::string, kvad::Tokenizer>();
  auto it = cache->find(fam);
  if (it == cache->end()) {
    std::string dir = std::string(KVAD_SOURCE_DIR) + "/tests/fixtures/tokenizers/" + fam;
    it = cache->emplace(fam, kvad::Tokenizer::load(dir + "/tokenizer.json", dir + "/tokenizer_config.json")).first;
  }
  return it->second;
}
}  // namespace

// The four tokenizers load before the first input: under a busy machine Qwen3's took past
// libFuzzer's 20 s per-input timeout once, charged to the empty input (2026-12-04).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  for (const char* fam : {"gpt2", "qwen3", "llama2", "unigram"}) tok(fam);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  bool valid = kvad::sanitize_utf8(text) == text;
  bool has_metaspace = text.find("\xE2\x96\x81") != std::string::npos;
  for (std::string fam : {"gpt2", "qwen3", "llama2", "unigram"}) {
    const kvad::Tokenizer& t = tok(fam.c_str());
    try {
      std::vector<int32_t> ids = t.encode(text, false, false);
      t.encode(text, true, true);
      bool round_trips = fam == "gpt2" || (fam == "llama2" && !has_metaspace);
      if (valid && round_trips && t.decode(ids) != text) std::abort();
    } catch (const kvad::Error&) {
    }
  }
  return 0;
}
