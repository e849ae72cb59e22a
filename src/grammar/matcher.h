// Grammar-constrained decoding: which tokens may come next, and the grammar state advanced by
// the token that was sampled (docs/grammar.md has the design and the measured cost).
//
// A GrammarMatcher runs a pushdown automaton over the grammar (stacks of rule positions, hash-
// consed, a set of them for the grammar's ambiguity) on the bytes of the tokens, UTF-8 decoded
// as they come (a token may end inside a character). Its states are built lazily into a byte-level
// DFA: each (state, byte) transition is computed once, then a table lookup, and each state's
// token mask is computed once by one scan of the vocabulary trie (token_trie.h) and cached. A
// JSON schema's grammar has a few hundred states, so after the first visits a step costs a
// cached mask applied to the logits.
#pragma once
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "core/json.h"
#include "grammar/grammar.h"
#include "grammar/token_trie.h"

namespace kvad::grammar {

// A compiled constraint: immutable, shared by every sequence that decodes under it.
struct Constraint {
  std::shared_ptr<const Grammar> grammar;
};
// GBNF text (grammar.h): errors "grammar: line L, column C: ...".
Constraint compile_gbnf(std::string_view text);
// A JSON Schema (json_schema.h): errors "json_schema: ...".
Constraint compile_json_schema(const OrderedJson& schema);  // properties in the schema's order
Constraint compile_json_schema(const Json& schema);         // properties sorted by name
// Any JSON object (OpenAI's response_format json_object).
Constraint json_object();

struct MatcherLimits {
  size_t max_states = 1 << 16;       // DFA states (a 1 KiB transition row each)
  size_t max_stacks = 1 << 21;       // stack frames, all states together
  size_t max_set = 1024;             // stacks alive at once (the grammar's ambiguity)
  int32_t max_depth = 512;           // nested rules on one stack
  size_t max_cached_masks = 256;     // vocab/8 bytes each; the cache is cleared when full
  // Closure steps (a rule position on a stack, expanded once). A grammar as ambiguous as
  // `root ::= [a-z] (root+)*` stays within the limits above yet needs minutes per mask; a JSON
  // schema's grammar needs under 10,000 steps per token and 40,000 in all (docs/grammar.md).
  size_t max_steps_per_call = 1 << 20;  // one mask, or one accept_bytes
  size_t max_steps = 1 << 24;           // the matcher's whole life
};

class GrammarMatcher {
 public:
  GrammarMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> vocab,
                 const MatcherLimits& limits = {});
  ~GrammarMatcher();
  GrammarMatcher(GrammarMatcher&&) noexcept;
  GrammarMatcher& operator=(GrammarMatcher&&) noexcept;

  // Bit t of the result (vocab_size bits) = token t may come next; EOS ids only when the grammar
  // is complete. The reference stays valid until the next call.
  const std::vector<uint64_t>& allowed();
  // Sets logits[t] = -inf for every token not allowed (t >= the vocabulary: always). When no
  // token at all is allowed (a grammar the vocabulary cannot spell) the EOS ids stay open.
  void mask_logits(float* logits, int64_t n);
  // Advances by a token; false (state unchanged) when the grammar does not allow it.
  bool accept(int32_t token);
  bool accept_bytes(std::string_view bytes);  // the same for raw text
  bool accepting() const;  // the text so far is a complete sentence of the grammar
  bool finished() const;   // EOS was accepted, or nothing but EOS can follow
  size_t states() const;   // DFA states built so far (for benchmarks and tests)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvad::grammar
