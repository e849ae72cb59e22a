// libFuzzer: arbitrary bytes as the chat JSONL of `kvad train --lora --data FILE.jsonl`
// (src/train/token_data.cpp): lines read with their limits, each parsed and checked as a
// conversation, rendered with a real chat template (Qwen3's, which re-renders earlier turns, or
// Qwen2.5's ChatML, which does not), tokenized, masked and cut to a small context. Every bad file
// is a kvad::Error naming it; a file that loads gives batches within their bounds.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fs.h"
#include "tokenizer/tokenizer.h"
#include "train/token_data.h"

namespace {

constexpr int64_t kContext = 48;

const kvad::Tokenizer& tokenizer(bool chatml) {
  static const std::string dir = std::string(KVAD_SOURCE_DIR) + "/tests/fixtures/tokenizers/qwen3";
  static const kvad::Tokenizer qwen3 = kvad::Tokenizer::load(dir + "/tokenizer.json", dir + "/tokenizer_config.json");
  static const kvad::Tokenizer qwen25 = [] {
    kvad::Json tc = kvad::read_json_file(dir + "/tokenizer_config.json");
    tc["chat_template"] =
        kvad::read_file(std::string(KVAD_SOURCE_DIR) + "/tests/fixtures/chat_templates/qwen2.5-7b-instruct.jinja");
    return kvad::Tokenizer::from_json(kvad::read_json_file(dir + "/tokenizer.json"), tc, dir + "/tokenizer.json");
  }();
  return chatml ? qwen25 : qwen3;
}

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_chat_jsonl: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Named *.jsonl mostly; every 4th input as *.txt, which is chat only when its first line says so.
  static const std::string base = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
                                  "/fuzz_chat_jsonl." + std::to_string(getpid());
  const std::string path = base + (size % 4 == 3 ? ".txt" : ".jsonl");
  {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) return 0;
    std::fwrite(data, 1, size, f);
    std::fclose(f);
  }
  const kvad::Tokenizer& tok = tokenizer(size % 2);
  try {
    kvad::train::TokenData d = kvad::train::load_token_data(path, tok, kContext);
    const int64_t B = 3;
    std::vector<int32_t> x(B * kContext), y(B * kContext);
    int64_t T = kvad::train::token_batch(d, 1, 1, B, kContext, x.data(), y.data());
    check(T >= 1 && T <= kContext, "training batch length out of range");
    for (int64_t i = 0; i < B * T; i++)
      check(x[i] >= 0 && x[i] < tok.vocab_size() && y[i] < tok.vocab_size(), "bad id");
    int64_t scored = 0;
    for (int64_t i = 0, n = kvad::train::token_val_batches(d, B, kContext); i < n; i++) {
      int64_t rows = 0;
      T = kvad::train::token_val_batch(d, i, B, kContext, x.data(), y.data(), &rows);
      check(T >= 1 && T <= kContext && rows >= 1 && rows <= B, "validation batch out of range");
      for (int64_t j = 0; j < rows * T; j++) scored += y[j] >= 0;
    }
    check(scored == d.val_targets, "validation targets differ from the count");
    (void)kvad::train::target_bytes(tok, y.data(), B * T);
    (void)kvad::train::describe(d, kContext);
  } catch (const kvad::Error&) {
  }
  std::remove(path.c_str());
  return 0;
}
