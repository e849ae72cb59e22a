// GBNF text -> Grammar. A recursive-descent parser over the text with explicit bounds (grammars
// arrive in requests: hostile input), then the checks the matcher relies on: every rule defined,
// a root, no left recursion.
#include <algorithm>
#include <map>

#include "core/error.h"
#include "core/utf8.h"
#include "grammar/grammar.h"

namespace kvad::grammar {

bool CharSet::contains(uint32_t cp) const {
  if (cp < 128) return (ascii[cp >> 6] >> (cp & 63)) & 1;
  auto it = std::upper_bound(ranges.begin(), ranges.end(), std::make_pair(cp, UINT32_MAX));
  return it != ranges.begin() && std::prev(it)->second >= cp;
}

bool CharSet::intersects(uint32_t lo, uint32_t hi) const {
  for (const auto& [a, b] : ranges)
    if (a <= hi && b >= lo) return true;
  return false;
}

bool CharSet::covers(uint32_t lo, uint32_t hi) const {
  for (const auto& [a, b] : ranges)
    if (a <= lo && b >= hi) return true;
  return false;
}

namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

CharSet make_charset(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated) {
  std::sort(ranges.begin(), ranges.end());
  CharSet cs;
  for (const auto& r : ranges) {
    if (!cs.ranges.empty() && r.first <= cs.ranges.back().second + 1)
      cs.ranges.back().second = std::max(cs.ranges.back().second, r.second);
    else
      cs.ranges.push_back(r);
  }
  if (negated) {
    std::vector<std::pair<uint32_t, uint32_t>> out;
    uint32_t next = 0;
    for (const auto& [a, b] : cs.ranges) {
      if (a > next) out.push_back({next, a - 1});
      next = b + 1;
    }
    if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
    cs.ranges = std::move(out);
  }
  for (const auto& [a, b] : cs.ranges)
    for (uint32_t c = a; c <= std::min<uint32_t>(b, 127); c++) cs.ascii[c >> 6] |= uint64_t(1) << (c & 63);
  return cs;
}

using Sequence = std::vector<Element>;

struct RuleDraft {
  std::string name;
  std::vector<Sequence> alts;
  bool defined = false;
  size_t first_use = std::string::npos;  // offset of the first reference, for "never defined"
};

class Parser {
 public:
  Parser(std::string_view text, const GbnfLimits& limits) : s_(text), lim_(limits) {}

  Grammar run() {
    if (s_.size() > lim_.max_text_bytes)
      fail("grammar: the grammar is {} bytes, over the limit of {}", s_.size(), lim_.max_text_bytes);
    skip_space(true);
    while (pos_ < s_.size()) {
      parse_rule();
      skip_space(true);
    }
    return finish();
  }

 private:
  // ---- errors -----------------------------------------------------------------------------
  [[noreturn]] void error_at(size_t at, const std::string& what) const { fail("grammar: {}: {}", where(at), what); }
  // "line L, column C" of a byte offset; columns count characters.
  std::string where(size_t at) const {
    int line = 1, col = 1;
    for (size_t i = 0; i < at && i < s_.size(); i++) {
      if (s_[i] == '\n') line++, col = 1;
      else if (((unsigned char)s_[i] & 0xC0) != 0x80) col++;
    }
    return fmt::format("line {}, column {}", line, col);
  }
  // A rule name as an error quotes it (fuzz_grammar: a 359-character name came back whole).
  static std::string quoted_name(std::string_view name) { return "'" + text_snippet(name) + "'"; }
  std::string describe_here() const {
    if (pos_ >= s_.size()) return "the end of the grammar";
    unsigned char c = (unsigned char)s_[pos_];
    if (c == '\n') return "a line break";
    if (c < 0x20 || c >= 0x7F) return fmt::format("byte 0x{:02X}", c);
    return fmt::format("'{}'", (char)c);
  }

  // ---- lexing -----------------------------------------------------------------------------
  static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }
  // Skips blanks and # comments; line breaks only when `newlines` (inside a group, after `|` or
  // `::=`) or when the rule visibly goes on: the next line is not a new `name ::=` nor the end.
  void skip_space(bool newlines) {
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c == ' ' || c == '\t' || c == '\r') pos_++;
      else if (c == '#') while (pos_ < s_.size() && s_[pos_] != '\n') pos_++;
      else if (c == '\n' && (newlines || rule_continues_after(pos_))) pos_++;
      else break;
    }
  }
  bool rule_continues_after(size_t p) const {
    while (p < s_.size()) {
      char c = s_[p];
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n') p++;
      else if (c == '#') while (p < s_.size() && s_[p] != '\n') p++;
      else break;
    }
    if (p >= s_.size()) return false;
    size_t q = p;
    while (q < s_.size() && is_name_char(s_[q])) q++;
    if (q == p) return true;  // `|`, a literal, a group...
    while (q < s_.size() && (s_[q] == ' ' || s_[q] == '\t')) q++;
    return s_.compare(q, 3, "::=") != 0;
  }
  std::string parse_name() {
    size_t start = pos_;
    while (pos_ < s_.size() && is_name_char(s_[pos_])) pos_++;
    if (pos_ == start) error_at(pos_, "expected a rule name, found " + describe_here());
    return std::string(s_.substr(start, pos_ - start));
  }
  uint32_t parse_hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; i++, pos_++) {
      char c = pos_ < s_.size() ? s_[pos_] : 0;
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) error_at(pos_, fmt::format("expected {} hex digits in the escape, found {}", digits, describe_here()));
      v = v * 16 + (uint32_t)d;
    }
    return v;
  }
  // One character of a literal or class: an escape or one UTF-8 encoded code point.
  uint32_t parse_char() {
    size_t start = pos_;
    unsigned char c = (unsigned char)s_[pos_];
    uint32_t cp;
    if (c == '\\') {
      pos_++;
      if (pos_ >= s_.size()) error_at(start, "an escape '\\' at the end of the grammar");
      char e = s_[pos_++];
      switch (e) {
        case 'n': cp = '\n'; break;
        case 'r': cp = '\r'; break;
        case 't': cp = '\t'; break;
        case 'x': cp = parse_hex(2); break;
        case 'u': cp = parse_hex(4); break;
        case 'U': cp = parse_hex(8); break;
        case '\\': case '"': case '[': case ']': case '-': case '^': case '/': case '\'': cp = (uint32_t)e; break;
        default: error_at(start, fmt::format("unknown escape '\\{}'", e));
      }
    } else {
      int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
      if (len == 0 || pos_ + (size_t)len > s_.size()) error_at(start, "invalid UTF-8 in the grammar");
      cp = len == 1 ? c : c & (0xFF >> (len + 1));
      for (int i = 1; i < len; i++) {
        unsigned char cc = (unsigned char)s_[pos_ + (size_t)i];
        if ((cc & 0xC0) != 0x80) error_at(start, "invalid UTF-8 in the grammar");
        cp = (cp << 6) | (cc & 0x3F);
      }
      pos_ += (size_t)len;
    }
    if (cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF))
      error_at(start, fmt::format("U+{:04X} is not a Unicode scalar value", cp));
    return cp;
  }

  // ---- rules ------------------------------------------------------------------------------
  int32_t rule_id(const std::string& name, size_t at) {
    auto [it, added] = ids_.try_emplace(name, (int32_t)rules_.size());
    if (added) {
      new_rule(name);
      rules_.back().first_use = at;
    }
    return it->second;
  }
  int32_t new_rule(const std::string& name) {
    if (rules_.size() >= lim_.max_rules) error_at(pos_, fmt::format("the grammar needs more than {} rules", lim_.max_rules));
    rules_.push_back(RuleDraft{name, {}, false, std::string::npos});
    return (int32_t)rules_.size() - 1;
  }
  int32_t synth_rule(int32_t parent, std::vector<Sequence> alts) {
    std::string name = fmt::format("{}_{}", rules_[(size_t)parent].name, rules_.size());
    int32_t id = new_rule(name);
    for (const Sequence& a : alts) count_elements(a.size() + 1);
    rules_[(size_t)id].alts = std::move(alts);
    rules_[(size_t)id].defined = true;
    return id;
  }
  void count_elements(size_t n) {
    elements_ += n;
    if (elements_ > lim_.max_elements)
      error_at(pos_, fmt::format("the grammar expands to more than {} elements", lim_.max_elements));
  }

  void parse_rule() {
    size_t start = pos_;
    std::string name = parse_name();
    skip_space(false);
    if (s_.compare(pos_, 3, "::=") != 0) error_at(pos_, fmt::format("expected '::=' after rule name {}, found {}", quoted_name(name), describe_here()));
    pos_ += 3;
    skip_space(true);
    int32_t id = rule_id(name, start);
    if (rules_[(size_t)id].defined) error_at(start, fmt::format("rule {} is defined twice", quoted_name(name)));
    rules_[(size_t)id].defined = true;
    rules_[(size_t)id].alts = parse_alternates(id, false);
    if (pos_ < s_.size() && s_[pos_] != '\n')
      error_at(pos_, fmt::format("unexpected {} in rule {}", describe_here(), quoted_name(name)));
  }

  std::vector<Sequence> parse_alternates(int32_t rule, bool nested) {
    std::vector<Sequence> alts;
    alts.push_back(parse_sequence(rule, nested));
    while (pos_ < s_.size() && s_[pos_] == '|') {
      pos_++;
      skip_space(true);
      alts.push_back(parse_sequence(rule, nested));
    }
    return alts;
  }

  Sequence parse_sequence(int32_t rule, bool nested) {
    Sequence seq;
    size_t last = std::string::npos;  // where the last item starts in seq (what a `*` repeats)
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      size_t start = pos_;
      if (c == '"') {
        last = seq.size();
        parse_literal(seq);
        if (seq.size() == last) last = std::string::npos;  // "" matches nothing to repeat
      } else if (c == '[') {
        last = seq.size();
        seq.push_back(parse_class());
      } else if (c == '.') {
        pos_++;
        last = seq.size();
        seq.push_back(add_charset(make_charset({{0, kMaxCodePoint}}, false)));
      } else if (c == '(') {
        pos_++;
        if (++depth_ > lim_.max_nesting) error_at(start, fmt::format("groups nest deeper than {}", lim_.max_nesting));
        skip_space(true);
        int32_t g = synth_rule(rule, {});
        std::vector<Sequence> alts = parse_alternates(g, true);
        for (const Sequence& a : alts) count_elements(a.size() + 1);
        rules_[(size_t)g].alts = std::move(alts);
        if (pos_ >= s_.size() || s_[pos_] != ')') error_at(pos_, fmt::format("expected ')' to close the group opened at {}, found {}", where(start), describe_here()));
        pos_++;
        depth_--;
        last = seq.size();
        seq.push_back({ElemKind::Rule, g});
      } else if (is_name_char(c)) {
        std::string name = parse_name();
        last = seq.size();
        seq.push_back({ElemKind::Rule, rule_id(name, start)});
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (last == std::string::npos) error_at(start, fmt::format("'{}' has nothing before it to repeat", c));
        parse_repetition(rule, seq, last);
      } else {
        break;  // `|`, `)`, the end of the rule: the caller decides
      }
      skip_space(nested);
    }
    count_elements(seq.size());
    return seq;
  }

  Element add_charset(CharSet cs) {
    charsets_.push_back(std::move(cs));
    return {ElemKind::Chars, (int32_t)charsets_.size() - 1};
  }

  void parse_literal(Sequence& seq) {
    size_t start = pos_++;
    while (true) {
      if (pos_ >= s_.size()) error_at(start, "unterminated string literal");
      if (s_[pos_] == '"') break;
      uint32_t cp = parse_char();
      seq.push_back(add_charset(make_charset({{cp, cp}}, false)));
      count_elements(1);
    }
    pos_++;
  }

  Element parse_class() {
    size_t start = pos_++;
    bool negated = pos_ < s_.size() && s_[pos_] == '^';
    if (negated) pos_++;
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    while (true) {
      if (pos_ >= s_.size()) error_at(start, "unterminated character class (no closing ']')");
      if (s_[pos_] == ']') break;
      size_t at = pos_;
      uint32_t lo = parse_char(), hi = lo;
      if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
        pos_++;
        hi = parse_char();
        if (hi < lo) error_at(at, fmt::format("character range U+{:04X}-U+{:04X} is reversed", lo, hi));
      }
      ranges.push_back({lo, hi});
      if (ranges.size() > lim_.max_elements) error_at(at, "character class too long");
    }
    pos_++;
    return add_charset(make_charset(std::move(ranges), negated));
  }

  uint32_t parse_count() {
    size_t start = pos_;
    uint64_t v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      v = v * 10 + (uint64_t)(s_[pos_++] - '0');
      if (v > lim_.max_repetition) error_at(start, fmt::format("repetition count over the limit of {}", lim_.max_repetition));
    }
    if (pos_ == start) error_at(pos_, "expected a number in '{m,n}', found " + describe_here());
    return (uint32_t)v;
  }

  // The item seq[last..] becomes one element (a rule when it is a literal of several chars),
  // then its repetition: x* = star, x+ = x star, x? = opt, x{m,n} = m copies and n-m nested opts.
  void parse_repetition(int32_t rule, Sequence& seq, size_t last) {
    size_t start = pos_;
    char op = s_[pos_++];
    uint32_t lo = 0, hi = 0;
    bool open = false;
    if (op == '*') open = true;
    else if (op == '+') lo = 1, open = true;
    else if (op == '?') hi = 1;
    else {
      skip_space(true);
      lo = hi = parse_count();
      skip_space(true);
      if (pos_ < s_.size() && s_[pos_] == ',') {
        pos_++;
        skip_space(true);
        if (pos_ < s_.size() && s_[pos_] == '}') open = true;
        else hi = parse_count();
        skip_space(true);
      }
      if (pos_ >= s_.size() || s_[pos_] != '}') error_at(pos_, "expected '}' to close the repetition, found " + describe_here());
      pos_++;
      if (!open && hi < lo) error_at(start, fmt::format("repetition {{{},{}}} has its maximum below its minimum", lo, hi));
    }
    Element item = seq[last];
    if (seq.size() - last > 1) item = {ElemKind::Rule, synth_rule(rule, {Sequence(seq.begin() + (ptrdiff_t)last, seq.end())})};
    seq.resize(last);
    count_elements(lo);
    for (uint32_t i = 0; i < lo; i++) seq.push_back(item);
    if (open) {
      int32_t star = new_rule(fmt::format("{}_{}", rules_[(size_t)rule].name, rules_.size()));
      rules_[(size_t)star].alts = {{item, {ElemKind::Rule, star}}, {}};
      rules_[(size_t)star].defined = true;
      count_elements(4);
      seq.push_back({ElemKind::Rule, star});
    } else if (hi > lo) {
      int32_t opt = synth_rule(rule, {{item}, {}});
      for (uint32_t k = lo + 1; k < hi; k++) opt = synth_rule(rule, {{item, {ElemKind::Rule, opt}}, {}});
      seq.push_back({ElemKind::Rule, opt});
    }
  }

  // ---- checks -----------------------------------------------------------------------------
  Grammar finish() {
    for (const RuleDraft& r : rules_)
      if (!r.defined) error_at(r.first_use, fmt::format("rule {} is used but never defined", quoted_name(r.name)));
    auto root = ids_.find("root");
    if (root == ids_.end()) fail("grammar: there is no rule named 'root' (the start of the grammar)");
    check_left_recursion();
    Grammar g;
    g.root = root->second;
    g.charsets = std::move(charsets_);
    for (size_t id = 0; id < rules_.size(); id++) {
      g.names.push_back(rules_[id].name);
      g.alts.emplace_back();
      for (const Sequence& a : rules_[id].alts) {
        g.alts.back().push_back((int32_t)g.elems.size());
        g.elems.insert(g.elems.end(), a.begin(), a.end());
        g.elems.push_back({ElemKind::End, (int32_t)id});
      }
    }
    return g;
  }

  std::vector<bool> nullable_rules() const {
    std::vector<bool> nullable(rules_.size(), false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t id = 0; id < rules_.size(); id++) {
        if (nullable[id]) continue;
        for (const Sequence& a : rules_[id].alts)
          if (std::all_of(a.begin(), a.end(), [&](const Element& e) { return e.kind == ElemKind::Rule && nullable[(size_t)e.value]; })) {
            nullable[id] = changed = true;
            break;
          }
      }
    }
    return nullable;
  }

  // A rule that can reach itself before consuming a character would make the matcher's closure
  // loop forever: refused, naming a rule on the cycle. Iterative DFS: rules can be many.
  void check_left_recursion() const {
    std::vector<bool> nullable = nullable_rules();
    std::vector<std::vector<int32_t>> left(rules_.size());
    for (size_t id = 0; id < rules_.size(); id++)
      for (const Sequence& a : rules_[id].alts)
        for (const Element& e : a) {
          if (e.kind != ElemKind::Rule) break;
          left[id].push_back(e.value);
          if (!nullable[(size_t)e.value]) break;
        }
    std::vector<uint8_t> color(rules_.size(), 0);  // 0 new, 1 on the path, 2 done
    std::vector<std::pair<int32_t, size_t>> stack;
    for (size_t start = 0; start < rules_.size(); start++) {
      if (color[start]) continue;
      stack.push_back({(int32_t)start, 0});
      color[start] = 1;
      while (!stack.empty()) {
        auto& [r, i] = stack.back();
        if (i < left[(size_t)r].size()) {
          int32_t next = left[(size_t)r][i++];
          if (color[(size_t)next] == 1)
            fail("grammar: rule {} can reach itself without consuming a character (left recursion, or a repetition of "
                 "something that can be empty)", quoted_name(user_name(next)));
          if (color[(size_t)next] == 0) {
            color[(size_t)next] = 1;
            stack.push_back({next, 0});
          }
        } else {
          color[(size_t)r] = 2;
          stack.pop_back();
        }
      }
    }
  }
  // Synthesized rules are named after the rule they appear in: report that one.
  std::string user_name(int32_t id) const {
    const std::string& n = rules_[(size_t)id].name;
    size_t us = n.find('_');
    while (us != std::string::npos && !ids_.count(n.substr(0, us))) us = n.find('_', us + 1);
    return ids_.count(n) ? n : us != std::string::npos ? n.substr(0, us) : n;
  }

  std::string_view s_;
  const GbnfLimits& lim_;
  size_t pos_ = 0;
  int depth_ = 0;
  size_t elements_ = 0;
  std::vector<RuleDraft> rules_;
  std::map<std::string, int32_t> ids_;
  std::vector<CharSet> charsets_;
};

}  // namespace

Grammar parse_gbnf(std::string_view text, const GbnfLimits& limits) { return Parser(text, limits).run(); }

}  // namespace kvad::grammar
