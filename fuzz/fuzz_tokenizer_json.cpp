// libFuzzer target: arbitrary bytes as tokenizer.json. Loading must either succeed or throw
// kvad::Error (any other exception, crash, leak or sanitizer report is a bug); whatever loads must
// encode and decode text without going wrong.
//   CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DKVAD_FUZZ=ON && ninja -C build-fuzz fuzz_tokenizer_json
//   ./build-fuzz/fuzz_tokenizer_json -max_total_time=120 -max_len=4096 fuzz/corpus/tokenizer_json
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/json.h"
#include "core/utf8.h"
#include "tokenizer/tokenizer.h"

using namespace kvad;

static void check(bool ok) {
  if (!ok) __builtin_trap();
}

static void exercise(const Tokenizer& tok, std::string_view text) {
  for (bool parse_special : {true, false}) {
    std::vector<int32_t> ids = tok.encode(text, parse_special, /*add_special=*/parse_special);
    for (int32_t id : ids) check(id >= 0 && id < tok.vocab_size());
    std::string decoded = tok.decode(ids);
    check(is_valid_utf8(decoded));
    StreamDecoder stream(tok, /*skip_special=*/true);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.push(id);
    streamed += stream.flush();
    check(is_valid_utf8(streamed));
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input((const char*)data, size);
  Json j;
  try {
    j = parse_json(input, "fuzz/tokenizer.json");
  } catch (const Error&) {
    return 0;
  } catch (const Json::exception&) {
    // core's parse_json lets nlohmann's out_of_range ("1e999": number overflow) through; Tokenizer::load
    // converts it. Not the tokenizer's code: skip.
    return 0;
  }
  try {
    Tokenizer tok = Tokenizer::from_json(j, Json::object(), "fuzz/tokenizer.json");
    exercise(tok, "Hello world! It's 2024 <|endoftext|> <s>\n\n  caf\xC3\xA9 e\xCC\x81 \xF0\x9F\x98\x80 \xFF\xFE");
    // The input's own tail as text too: it reaches added tokens and vocab pieces the fuzzer wrote.
    exercise(tok, input.substr(size > 48 ? size - 48 : 0));
    // The same document as tokenizer_config.json: bos/eos/chat_template readers on odd shapes.
    Tokenizer::from_json(j, j, "fuzz/tokenizer.json");
  } catch (const Error&) {
  }
  return 0;
}
