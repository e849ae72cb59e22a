// libFuzzer: arbitrary bytes as a CLIP tokenizer's two files, vocab.json and merges.txt (split at
// the first NUL byte; no NUL: all of it is merges.txt beside a minimal vocabulary). A file that
// does not read is a kvad::Error naming it; a tokenizer that reads then tokenizes a fixed prompt
// and the input's own bytes, which must give ids of its vocabulary, padded to its length.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "tokenizer/clip.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  size_t nul = in.find('\0');
  std::string_view vocab = R"({"a</w>": 0, "b": 1, "ab</w>": 2, "<|startoftext|>": 3, "<|endoftext|>": 4})";
  std::string_view merges = in;
  if (nul != std::string_view::npos) vocab = in.substr(0, nul), merges = in.substr(nul + 1);
  try {
    auto t = kvad::tok::ClipTokenizer::from_texts(vocab, merges, "fuzz/vocab.json", "fuzz/merges.txt");
    for (std::string_view text : {std::string_view("A photo of a Café, 日本 <|endoftext|> x's 12"), merges.substr(0, 256)}) {
      auto ids = t.encode_padded(text);
      if ((int64_t)ids.size() != t.max_length()) abort();
      for (int32_t id : ids)
        if (id < 0) abort();
    }
  } catch (const kvad::Error&) {
  }
  return 0;
}
