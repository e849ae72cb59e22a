// A context-free grammar over Unicode code points, as the matcher (matcher.h) runs it, and the
// GBNF parser that builds one (llama.cpp's grammar format, docs/grammar.md).
//
// The form is llama.cpp's: every rule is a list of alternatives, every alternative a flat run of
// elements ended by End. Groups, `*`, `+`, `?` and `{m,n}` become synthesized rules at parse
// time, so the matcher only ever sees character sets, rule references and ends. A rule reference
// followed by End is a tail call (the matcher pushes no frame for it), so right recursion - which
// is what every repetition turns into - runs in constant stack.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvad::grammar {

// Sorted, disjoint, inclusive code point ranges (negated classes are complemented at parse time),
// with a bitmap for ASCII: the common case is one bit test.
struct CharSet {
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  uint64_t ascii[2] = {0, 0};
  bool contains(uint32_t cp) const;
  bool intersects(uint32_t lo, uint32_t hi) const;  // any code point of [lo, hi] in the set
  bool covers(uint32_t lo, uint32_t hi) const;      // all of [lo, hi] in the set
};

enum class ElemKind : uint8_t { End, Chars, Rule };

struct Element {
  ElemKind kind;
  int32_t value;  // Chars: index into Grammar::charsets; Rule: rule id; End: the rule it ends
};

struct Grammar {
  std::vector<Element> elems;                    // all alternatives, each ended by End
  std::vector<std::vector<int32_t>> alts;        // rule id -> start positions of its alternatives
  std::vector<std::string> names;                // rule id -> name (synthesized: "name_3")
  std::vector<CharSet> charsets;
  int32_t root = -1;
};

// Bounds for hostile input: the text, the grammar it expands to, and how deep groups nest.
struct GbnfLimits {
  size_t max_text_bytes = 1 << 20;
  size_t max_elements = 1 << 20;   // after repetitions are expanded
  size_t max_rules = 1 << 16;
  int max_nesting = 64;            // ( ( ( ... ) ) )
  uint32_t max_repetition = 2000;  // the m and n of {m,n} (llama.cpp's limit too)
};

// Parses GBNF; the rule named `root` is the start. Throws kvad::Error
// "grammar: line L, column C: <what is wrong>" for syntax errors, and "grammar: ..." naming the
// rule for an undefined rule, a rule defined twice, no root, or left recursion (which the
// matcher cannot run).
Grammar parse_gbnf(std::string_view text, const GbnfLimits& limits = {});

// Whether the grammar derives exactly `text` (a test and debugging aid; the matcher underneath).
bool grammar_accepts(const Grammar& g, std::string_view text);

}  // namespace kvad::grammar
