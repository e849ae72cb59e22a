#include "tokenizer/pretokenizer.h"

#include "core/utf8.h"
#include "tokenizer/unicode_chars.h"

namespace kvad::tok {

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
  PreTokenizer p;
  if (j) p.add(*j, f);  // none: the whole normalised text is one word (Llama 2, Mistral)
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
    return for_each_in_sequence(j, "pretokenizers", f, depth, steps_.size(),
                                [&](const Json& item, const Field& itf) { add(item, itf, depth + 1); });
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
  } else if (type == "Metaspace") {
    step = read_metaspace(j, f);
  } else if (type == "WhitespaceSplit") {
    step.kind = Step::kWhitespaceSplit;
  } else if (type == "Digits") {
    // HF's Digits splits on char::is_numeric (general category N): each digit alone or runs.
    step.regex = std::make_unique<Regex>("\\p{N}", f);
    step.behavior = read_bool(j, "individual_digits", false, f) ? SplitBehavior::Isolated : SplitBehavior::Contiguous;
  } else {
    f.at("type").fail("pre-tokenizer '{}' is not supported (only ByteLevel, Split, Digits, Metaspace, WhitespaceSplit, "
                      "Sequence)", type);
  }
  check_step_count(steps_.size() + 1, f);
  steps_.push_back(std::move(step));
}

PreTokenizer::Step PreTokenizer::read_metaspace(const Json& j, const Field& f) {
  Step step;
  step.kind = Step::kMetaspace;
  step.replacement = read_char_or(j, "replacement", "\u2581", f);
  // Files written before prepend_scheme existed say add_prefix_space instead.
  step.prepend = read_bool(j, "add_prefix_space", true, f) ? Prepend::kAlways : Prepend::kNever;
  if (const Json* scheme = find_field(j, "prepend_scheme")) {
    std::string s = read_string(*scheme, f.at("prepend_scheme"));
    if (s == "always") step.prepend = Prepend::kAlways;
    else if (s == "first") step.prepend = Prepend::kFirst;
    else if (s == "never") step.prepend = Prepend::kNever;
    else f.at("prepend_scheme").fail("expected \"always\", \"first\" or \"never\", got '{}'", s);
  }
  step.split = read_bool(j, "split", true, f);
  return step;
}

void PreTokenizer::run_from(size_t index, std::string_view text, bool at_start, const FnRef& emit) const {
  if (text.empty()) return;
  if (index == steps_.size()) return emit(text);
  switch (steps_[index].kind) {
    case Step::kMetaspace: return run_metaspace(index, text, at_start, emit);
    case Step::kWhitespaceSplit: return run_whitespace_split(index, text, at_start, emit);
    case Step::kSplit:
    case Step::kByteLevel: return run_split(index, text, at_start, emit);
  }
}

void PreTokenizer::run_split(size_t index, std::string_view text, bool at_start, const FnRef& emit) const {
  const Step& step = steps_[index];
  std::string prefixed;  // must outlive the pieces handed on below
  if (step.kind == Step::kByteLevel && step.add_prefix_space && text[0] != ' ') {
    prefixed = " " + std::string(text);
    text = prefixed;
  }
  if (!step.regex) return run_from(index + 1, text, at_start, emit);
  // A piece begins the input only if it is the first piece of a text that does.
  auto next = [&](size_t start, size_t end) {
    run_from(index + 1, text.substr(start, end - start), at_start && start == 0, emit);
  };

  if (step.kind == Step::kByteLevel || (step.behavior == SplitBehavior::Isolated && !step.invert)) {
    // Fast path (every real tokenizer): matches and the gaps between them are pieces, in order.
    size_t pos = 0, s, e;
    while (step.regex->find(text, pos, &s, &e)) {
      if (s > pos) next(pos, s);
      next(s, e);
      pos = e;
    }
    if (pos < text.size()) next(pos, text.size());
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
  for (const Segment& seg : apply_behavior(std::move(segs), step.behavior)) next(seg.start, seg.end);
}

// Spaces become the replacement character, which also marks where each word starts.
void PreTokenizer::run_metaspace(size_t index, std::string_view text, bool at_start, const FnRef& emit) const {
  const Step& step = steps_[index];
  std::string replaced;
  bool prepend = step.prepend == Prepend::kAlways || (step.prepend == Prepend::kFirst && at_start);
  // Not when the text already starts with one (a leading space becomes one too).
  if (prepend && text[0] != ' ' && text.substr(0, step.replacement.size()) != step.replacement)
    replaced = step.replacement;
  replaced.reserve(replaced.size() + text.size() + text.size() / 4);
  for (char c : text) {
    if (c == ' ') replaced += step.replacement;
    else replaced += c;
  }
  std::string_view all = replaced;
  if (!step.split) return run_from(index + 1, all, at_start, emit);
  // MergedWithNext: each replacement character starts a new piece.
  size_t start = 0;
  for (size_t pos = all.find(step.replacement, 1); pos != std::string_view::npos;
       pos = all.find(step.replacement, pos + 1)) {
    run_from(index + 1, all.substr(start, pos - start), at_start && start == 0, emit);
    start = pos;
  }
  run_from(index + 1, all.substr(start), at_start && start == 0, emit);
}

// Words between runs of Unicode white space; the white space itself is dropped.
void PreTokenizer::run_whitespace_split(size_t index, std::string_view text, bool at_start,
                                        const FnRef& emit) const {
  size_t word = std::string_view::npos;
  for (size_t i = 0; i < text.size();) {
    size_t at = i;
    bool space = is_white_space(next_codepoint(text, i));
    if (space && word != std::string_view::npos) {
      run_from(index + 1, text.substr(word, at - word), at_start && word == 0, emit);
      word = std::string_view::npos;
    } else if (!space && word == std::string_view::npos) {
      word = at;
    }
  }
  if (word != std::string_view::npos) run_from(index + 1, text.substr(word), at_start && word == 0, emit);
}

}  // namespace kvad::tok
