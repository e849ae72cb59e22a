#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>

#include "core/utf8.h"
#include "tokenizer/unicode_chars.h"

namespace kvad::tok {

Normalizer Normalizer::from_json(const Json* j, const Field& f) {
  Normalizer n;
  if (j) n.add(*j, f);
  return n;
}

void Normalizer::add(const Json& j, const Field& f, size_t depth) {
  require_object(j, f);
  std::string type = read_string_or(j, "type", "", f);
  if (type == "Sequence")
    return for_each_in_sequence(j, "normalizers", f, depth, steps_.size(),
                                [&](const Json& item, const Field& itf) { add(item, itf, depth + 1); });
  Step step;
  int form = UTF8PROC_STABLE;
  if (type == "NFC") form |= UTF8PROC_COMPOSE;
  else if (type == "NFD") form |= UTF8PROC_DECOMPOSE;
  else if (type == "NFKC") form |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
  else if (type == "NFKD") form |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
  else if (type == "Prepend") step.kind = Step::kPrepend, step.text = read_inserted_or(j, "prepend", "", f);
  else if (type == "Replace") step = read_replace(j, f);
  else if (type == "Lowercase") step.kind = Step::kLowercase;
  else if (type == "Strip") {
    step.kind = Step::kStrip;
    step.left = read_bool(j, "strip_left", true, f);
    step.right = read_bool(j, "strip_right", true, f);
  } else if (type == "Precompiled") {
    // SentencePiece's compiled normalization rules (T5, ALBERT, XLNet): a trie of replacements
    // applied per grapheme. It is not NFKC, and guessing would give other ids than HF.
    f.at("type").fail("normalizer 'Precompiled' (a SentencePiece precompiled_charsmap) is not supported");
  } else {
    f.at("type").fail("normalizer '{}' is not supported (only NFC/NFD/NFKC/NFKD, Prepend, Replace, Lowercase, "
                      "Strip and Sequence)", type);
  }
  if (step.kind == Step::kUnicodeForm) step.utf8proc_options = form;
  check_step_count(steps_.size() + 1, f);
  steps_.push_back(std::move(step));
}

Normalizer::Step Normalizer::read_replace(const Json& j, const Field& f) {
  Step step;
  step.kind = Step::kReplace;
  step.replacement = std::make_unique<Replacement>(Replacement::from_json(j, f));
  return step;
}

namespace {

bool is_ascii(std::string_view s) {
  for (unsigned char c : s)
    if (c >= 0x80) return false;
  return true;
}

std::string unicode_form(std::string_view text, int options) {
  // Every Unicode normal form leaves ASCII unchanged: skip the library call for the common case.
  if (is_ascii(text)) return std::string(text);
  utf8proc_uint8_t* out = nullptr;
  utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t*)text.data(), (utf8proc_ssize_t)text.size(), &out,
                                    (utf8proc_option_t)options);
  if (n < 0) fail("tokenizer normalizer: {}", utf8proc_errmsg(n));  // input is valid UTF-8: not expected
  std::string s((const char*)out, (size_t)n);
  std::free(out);
  return s;
}

std::string lowercase(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) append_utf8(out, (uint32_t)utf8proc_tolower((utf8proc_int32_t)next_codepoint(text, i)));
  return out;
}

// Whitespace removed from the ends, as Rust's trim_start / trim_end.
std::string_view strip(std::string_view text, bool left, bool right) {
  size_t b = 0, e = text.size();
  while (left && b < e) {
    size_t i = b;
    if (!is_white_space(next_codepoint(text, i))) break;
    b = i;
  }
  while (right && e > b) {
    size_t s = prev_char_start(text, e), i = s;
    if (!is_white_space(next_codepoint(text, i))) break;
    e = s;
  }
  return text.substr(b, e - b);
}

}  // namespace

void Normalizer::apply_step(const Step& step, std::string& text) {
  switch (step.kind) {
    case Step::kUnicodeForm: text = unicode_form(text, step.utf8proc_options); return;
    case Step::kPrepend:
      if (!text.empty()) text.insert(0, step.text);  // HF prepends nothing to an empty text
      return;
    case Step::kReplace: text = step.replacement->apply(text); return;
    case Step::kLowercase: text = lowercase(text); return;
    case Step::kStrip: text = std::string(strip(text, step.left, step.right)); return;
  }
}

std::string Normalizer::apply(std::string_view text) const {
  std::string cur(text);
  for (const Step& step : steps_) apply_step(step, cur);
  return cur;
}

}  // namespace kvad::tok
