#include "tokenizer/pretokenizer.h"

#include <utf8proc.h>

#include <cstdlib>

namespace kvad::tok {

// ---- normalizer ------------------------------------------------------------------------------

Normalizer Normalizer::from_json(const Json* j, const Field& f) {
  Normalizer n;
  if (j) n.add(*j, f);
  return n;
}

void Normalizer::add(const Json& j, const Field& f, size_t depth) {
  require_object(j, f);
  std::string type = read_string_or(j, "type", "", f);
  if (type == "Sequence") {
    check_sequence_depth(depth + 1, f);
    const Json* list = find_field(j, "normalizers");
    if (!list || !list->is_array()) f.at("normalizers").fail("expected an array");
    check_step_count(forms_.size() + list->size(), f.at("normalizers"));
    for (size_t i = 0; i < list->size(); i++) add((*list)[i], f.at("normalizers").at(i), depth + 1);
    return;
  }
  int opts = UTF8PROC_STABLE;
  if (type == "NFC") opts |= UTF8PROC_COMPOSE;
  else if (type == "NFD") opts |= UTF8PROC_DECOMPOSE;
  else if (type == "NFKC") opts |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
  else if (type == "NFKD") opts |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
  else f.at("type").fail("normalizer '{}' is not supported (only NFC/NFD/NFKC/NFKD and Sequence)", type);
  check_step_count(forms_.size() + 1, f);
  forms_.push_back(opts);
}

std::string Normalizer::apply(std::string_view text) const {
  std::string cur(text);
  // Every Unicode normal form leaves ASCII unchanged: skip the library call for the common case.
  bool ascii = true;
  for (unsigned char c : cur) ascii &= c < 0x80;
  if (ascii) return cur;
  for (int opts : forms_) {
    utf8proc_uint8_t* out = nullptr;
    utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t*)cur.data(), (utf8proc_ssize_t)cur.size(), &out,
                                      (utf8proc_option_t)opts);
    if (n < 0) fail("tokenizer normalizer: {}", utf8proc_errmsg(n));  // input is valid UTF-8: not expected
    cur.assign((const char*)out, (size_t)n);
    std::free(out);
  }
  return cur;
}

// ---- pre-tokenizer ---------------------------------------------------------------------------

namespace {

// GPT-2's pattern, built into HF's ByteLevel pre-tokenizer (use_regex = true).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

SplitBehavior parse_behavior(const Json& obj, const Field& f) {
  const Json* v = find_field(obj, "behavior");
  if (!v) return SplitBehavior::Isolated;
  std::string b = read_string(*v, f.at("behavior"));
  if (b == "Removed") return SplitBehavior::Removed;
  if (b == "Isolated") return SplitBehavior::Isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (b == "Contiguous") return SplitBehavior::Contiguous;
  f.at("behavior").fail("unknown split behavior '{}'", b);
}

struct Segment {
  size_t start, end;
  bool is_match;
};

// The same folds as HF's NormalizedString::split: decide which stretches become pieces.
std::vector<Segment> apply_behavior(std::vector<Segment> segs, SplitBehavior behavior) {
  std::vector<Segment> out;
  out.reserve(segs.size());
  bool prev_match = false;
  switch (behavior) {
    case SplitBehavior::Isolated:
      for (auto& s : segs) out.push_back({s.start, s.end, false});
      return out;
    case SplitBehavior::Removed:
      for (auto& s : segs)
        if (!s.is_match) out.push_back(s);
      return out;
    case SplitBehavior::Contiguous:
      for (auto& s : segs) {
        if (s.is_match == prev_match && !out.empty()) out.back().end = s.end;
        else out.push_back({s.start, s.end, false});
        prev_match = s.is_match;
      }
      return out;
    case SplitBehavior::MergedWithPrevious:
      for (auto& s : segs) {
        if (s.is_match && !prev_match && !out.empty()) out.back().end = s.end;
        else out.push_back({s.start, s.end, false});
        prev_match = s.is_match;
      }
      return out;
    case SplitBehavior::MergedWithNext:
      for (size_t i = segs.size(); i-- > 0;) {
        const Segment& s = segs[i];
        if (s.is_match && !prev_match && !out.empty()) out.back().start = s.start;
        else out.push_back({s.start, s.end, false});
        prev_match = s.is_match;
      }
      return {out.rbegin(), out.rend()};
  }
  return out;
}

}  // namespace

PreTokenizer PreTokenizer::from_json(const Json* j, const Field& f) {
  if (!j) f.fail("missing; only byte-level BPE tokenizers (with a ByteLevel pre-tokenizer) are supported");
  PreTokenizer p;
  p.add(*j, f);
  if (p.steps_.empty() || p.steps_.back().kind != Step::kByteLevel)
    f.fail("no ByteLevel step at the end; only byte-level BPE tokenizers are supported");
  for (size_t i = 0; i + 1 < p.steps_.size(); i++)
    if (p.steps_[i].kind == Step::kByteLevel) f.fail("ByteLevel must be the last pre-tokenizer step");
  return p;
}

void PreTokenizer::add(const Json& j, const Field& f, size_t depth) {
  require_object(j, f);
  std::string type = read_string_or(j, "type", "", f);
  Step step;
  if (type == "Sequence") {
    // run_from recurses once per step for every piece: the step count bounds its stack.
    check_sequence_depth(depth + 1, f);
    const Json* list = find_field(j, "pretokenizers");
    if (!list || !list->is_array()) f.at("pretokenizers").fail("expected an array");
    check_step_count(steps_.size() + list->size(), f.at("pretokenizers"));
    for (size_t i = 0; i < list->size(); i++) add((*list)[i], f.at("pretokenizers").at(i), depth + 1);
    return;
  } else if (type == "ByteLevel") {
    // HF's defaults when the fields are missing: add_prefix_space true, use_regex true.
    step.kind = Step::kByteLevel;
    step.add_prefix_space = read_bool(j, "add_prefix_space", true, f);
    if (read_bool(j, "use_regex", true, f)) step.regex = std::make_unique<Regex>(kGpt2Pattern, f);
  } else if (type == "Split") {
    const Json* pat = find_field(j, "pattern");
    Field pf = f.at("pattern");
    if (!pat || !pat->is_object()) pf.fail("expected an object {{\"Regex\": ...}} or {{\"String\": ...}}");
    if (const Json* re = find_field(*pat, "Regex")) {
      step.regex = std::make_unique<Regex>(read_string(*re, pf.at("Regex")), pf.at("Regex"));
    } else if (const Json* s = find_field(*pat, "String")) {
      std::string lit = read_string(*s, pf.at("String"));
      // HF: an empty literal never matches (the whole text stays one piece).
      step.regex = std::make_unique<Regex>(lit.empty() ? Regex("(*FAIL)", pf) : Regex::literal(lit, pf));
    } else {
      pf.fail("expected a \"Regex\" or \"String\" member");
    }
    step.behavior = parse_behavior(j, f);
    step.invert = read_bool(j, "invert", false, f);
  } else if (type == "Digits") {
    // HF's Digits splits on char::is_numeric (general category N): each digit alone or runs.
    step.regex = std::make_unique<Regex>("\\p{N}", f);
    step.behavior = read_bool(j, "individual_digits", false, f) ? SplitBehavior::Isolated : SplitBehavior::Contiguous;
  } else {
    f.at("type").fail("pre-tokenizer '{}' is not supported (only ByteLevel, Split, Digits, Sequence)", type);
  }
  check_step_count(steps_.size() + 1, f);
  steps_.push_back(std::move(step));
}

void PreTokenizer::run_from(size_t index, std::string_view text, const FnRef& emit) const {
  if (text.empty()) return;
  if (index == steps_.size()) return emit(text);
  const Step& step = steps_[index];

  std::string prefixed;  // must outlive the pieces handed on below
  if (step.kind == Step::kByteLevel && step.add_prefix_space && text[0] != ' ') {
    prefixed = " " + std::string(text);
    text = prefixed;
  }
  if (!step.regex) return run_from(index + 1, text, emit);

  if (step.kind == Step::kByteLevel || (step.behavior == SplitBehavior::Isolated && !step.invert)) {
    // Fast path (every real tokenizer): matches and the gaps between them are pieces, in order.
    size_t pos = 0, s, e;
    while (step.regex->find(text, pos, &s, &e)) {
      if (s > pos) run_from(index + 1, text.substr(pos, s - pos), emit);
      run_from(index + 1, text.substr(s, e - s), emit);
      pos = e;
    }
    if (pos < text.size()) run_from(index + 1, text.substr(pos), emit);
    return;
  }

  std::vector<Segment> segs;
  size_t pos = 0, s, e;
  while (step.regex->find(text, pos, &s, &e)) {
    if (s > pos) segs.push_back({pos, s, step.invert});
    segs.push_back({s, e, !step.invert});
    pos = e;
  }
  if (pos < text.size()) segs.push_back({pos, text.size(), step.invert});
  for (const Segment& seg : apply_behavior(std::move(segs), step.behavior))
    run_from(index + 1, text.substr(seg.start, seg.end - seg.start), emit);
}

}  // namespace kvad::tok
