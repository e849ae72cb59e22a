// libFuzzer target: arbitrary bytes as tokenizer.json. Loading must either succeed or throw
// kvad::Error (any other exception, crash, leak or sanitizer report is a bug); whatever loads must
// encode and decode text without going wrong.
//   CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DKVAD_FUZZ=ON && ninja -C build-fuzz fuzz_tokenizer_json
//   ./build-fuzz/fuzz_tokenizer_json -max_total_time=120 -max_len=4096 fuzz/corpus/tokenizer_json
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <vector>
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

// Whether some object in the document lists a key twice (nlohmann's DOM keeps the last value).
static bool has_repeated_key(std::string_view input) {
  struct Keys : nlohmann::json_sax<Json> {
    std::vector<std::set<std::string>> open;
    bool repeated = false;
    bool null() override { return true; }
    bool boolean(bool) override { return true; }
    bool number_integer(number_integer_t) override { return true; }
    bool number_unsigned(number_unsigned_t) override { return true; }
    bool number_float(number_float_t, const string_t&) override { return true; }
    bool string(string_t&) override { return true; }
    bool binary(binary_t&) override { return true; }
    bool start_object(std::size_t) override { return open.emplace_back(), true; }
    bool end_object() override { return open.pop_back(), true; }
    bool start_array(std::size_t) override { return true; }
    bool end_array() override { return true; }
    bool key(string_t& k) override {
      repeated |= !open.back().insert(k).second;
      return !repeated;
    }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }
  } keys;
  Json::sax_parse(input.begin(), input.end(), &keys, nlohmann::detail::input_format_t::json, false);
  return keys.repeated;
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
  // The text read with the vocab and merges taken aside (Tokenizer::parse, what kvad run does)
  // must load where the DOM loads and fail where it fails, with the same ids. (Not the same
  // message: the two meet a file's bad entries in different orders. Nor where a key repeats:
  // the DOM keeps the last value, the reader sees every one, as HF's serde does.)
  std::optional<Tokenizer> streamed;
  try {
    streamed.emplace(Tokenizer::parse(input, Json::object(), "fuzz/tokenizer.json"));
  } catch (const Error&) {
  }
  const bool comparable = !has_repeated_key(input);
  const std::string sample = "Hello world! It's 2024 <|endoftext|> <s>\n\n  caf\xC3\xA9 e\xCC\x81 \xF0\x9F\x98\x80 \xFF\xFE";
  std::optional<Tokenizer> tok;
  try {
    tok.emplace(Tokenizer::from_json(j, Json::object(), "fuzz/tokenizer.json"));
  } catch (const Error&) {
  }
  if (comparable) check(tok.has_value() == streamed.has_value());
  if (!tok) return 0;
  if (comparable) check(streamed->encode(sample) == tok->encode(sample));
  try {
    exercise(*tok, sample);
    // The input's own tail as text too: it reaches added tokens and vocab pieces the fuzzer wrote.
    exercise(*tok, input.substr(size > 48 ? size - 48 : 0));
    // The same document as tokenizer_config.json: bos/eos/chat_template readers on odd shapes.
    Tokenizer::from_json(j, j, "fuzz/tokenizer.json");
  } catch (const Error&) {
  }
  return 0;
}
