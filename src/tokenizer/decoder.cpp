#include "tokenizer/decoder.h"

#include "tokenizer/byte_level.h"

namespace kvad::tok {

Decoder Decoder::from_json(const Json* j, const Field& f, bool byte_level) {
  Decoder d;
  if (j) d.add(*j, f, 0);
  else if (byte_level) d.per_token_.push_back(Step{});  // HF's ByteLevel decoder is the only sensible one
  return d;
}

void Decoder::add(const Json& j, const Field& f, size_t depth) {
  require_object(j, f);
  std::string type = read_string_or(j, "type", "", f);
  if (type == "Sequence")
    return for_each_in_sequence(j, "decoders", f, depth, steps_,
                                [&](const Json& item, const Field& itf) { add(item, itf, depth + 1); });
  check_step_count(++steps_, f);
  Step step;
  if (type == "ByteLevel") {
    step.kind = Step::kByteLevel;
  } else if (type == "Replace") {
    step.kind = Step::kReplace;
    step.replacement = std::make_shared<const Replacement>(Replacement::from_json(j, f));
    if (fused_ && !step.replacement->is_single_char())
      f.at("pattern").fail("a Replace after Fuse is only supported for a one-character String pattern");
  } else if (type == "ByteFallback") {
    if (fused_) f.at("type").fail("ByteFallback after Fuse is not supported");
    step.kind = Step::kByteFallback;
  } else if (type == "Fuse") {
    fused_ = true;  // the text is one token from here: Strip applies to its ends only
    return;
  } else if (type == "Strip") {
    step = read_strip(j, f);
    if (fused_) {
      if (step.stop != 0) f.at("stop").fail("a Strip at the end of the text (after Fuse) is not supported");
      return strip_at_start(step.text, step.start, f);
    }
  } else if (type == "Metaspace") {
    bool strips_first = false;
    step = read_metaspace(j, f, &strips_first);
    add_after_fuse(std::move(step), f);
    if (strips_first) strip_at_start(" ", 1, f);  // the space Metaspace put before the first word
    return;
  } else {
    f.at("type").fail("decoder '{}' is not supported (only ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace "
                      "and Sequence)", type);
  }
  add_after_fuse(std::move(step), f);
}

void Decoder::add_after_fuse(Step step, const Field& f) {
  // The start of the text is stripped last, after every per-token step: a step that came after
  // the strip in the file could see (or make) a different start.
  if (strip_count_ > 0) f.fail("decoder steps after a Strip at the start of the text are not supported");
  per_token_.push_back(std::move(step));
}

void Decoder::strip_at_start(std::string text, size_t count, const Field& f) {
  if (count == 0) return;
  if (strip_count_ > 0 && strip_text_ != text) f.fail("two Strip steps with different content are not supported");
  strip_text_ = std::move(text);
  strip_count_ += count;
}

Decoder::Step Decoder::read_strip(const Json& j, const Field& f) {
  Step step;
  step.kind = Step::kStrip;
  step.text = read_char_or(j, "content", " ", f);
  auto count = [&](const char* key) -> size_t {
    const Json* v = find_field(j, key);
    if (!v) return 0;
    if (!v->is_number_integer() || (!v->is_number_unsigned() && v->get<int64_t>() < 0))
      f.at(key).fail("expected a non-negative integer, got {}", json_snippet(*v));
    return (size_t)std::min<uint64_t>(v->get<uint64_t>(), 1 << 20);
  };
  step.start = count("start");
  step.stop = count("stop");
  return step;
}

Decoder::Step Decoder::read_metaspace(const Json& j, const Field& f, bool* strips_first) {
  Step step;
  step.kind = Step::kMetaspace;
  step.replacement = std::make_shared<const Replacement>(Replacement::literal(read_char_or(j, "replacement", "\u2581", f), " "));
  // A space the pre-tokenizer never prepends is not removed either.
  *strips_first = read_bool(j, "add_prefix_space", true, f);
  if (const Json* scheme = find_field(j, "prepend_scheme")) *strips_first = read_string(*scheme, f.at("prepend_scheme")) != "never";
  return step;
}

namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// "<0xE2>" -> 0xE2; -1 for any other piece.
int fallback_byte(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  int hi = hex_digit(piece[3]), lo = hex_digit(piece[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

void strip_ends(std::string& token, std::string_view c, size_t start, size_t stop) {
  size_t b = 0;
  for (size_t i = 0; i < start && token.compare(b, c.size(), c) == 0; i++) b += c.size();
  size_t e = token.size();
  for (size_t i = 0; i < stop && e >= b + c.size() && token.compare(e - c.size(), c.size(), c) == 0; i++) e -= c.size();
  token = token.substr(b, e - b);
}

}  // namespace

void Decoder::apply(const Step& step, std::string& token, bool added) {
  switch (step.kind) {
    case Step::kByteLevel:
      // HF's ByteLevel decoder gives a token's own UTF-8 when it is not all byte-level alphabet.
      if (!added) token = byte_level_alphabet().decode(token).value_or(token);
      return;
    case Step::kReplace:
    case Step::kMetaspace: token = step.replacement->apply(token); return;
    case Step::kByteFallback:
      if (int b = fallback_byte(token); b >= 0) token = std::string(1, (char)b);
      return;
    case Step::kStrip: strip_ends(token, step.text, step.start, step.stop); return;
  }
}

std::string Decoder::token_bytes(std::string_view piece, bool added) const {
  std::string token(piece);
  for (const Step& step : per_token_) apply(step, token, added);
  return token;
}

}  // namespace kvad::tok
