// GBNF parsing (what an error says, where), grammar acceptance against hand-checked strings, and
// JSON Schema -> grammar: what each keyword admits and what is refused by name.
#include <gtest/gtest.h>

#include "core/error.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"

using namespace kvad;
using namespace kvad::grammar;

namespace {

std::string parse_error(const std::string& gbnf) {
  try {
    parse_gbnf(gbnf);
  } catch (const Error& e) {
    return e.what();
  }
  return "(parsed)";
}

bool accepts(const std::string& gbnf, const std::string& text) { return grammar_accepts(parse_gbnf(gbnf), text); }

std::string schema_error(const std::string& schema) {
  try {
    compile_json_schema(OrderedJson::parse(schema));
  } catch (const Error& e) {
    return e.what();
  }
  return "(compiled)";
}

bool schema_accepts(const std::string& schema, const std::string& text) {
  return grammar_accepts(*compile_json_schema(OrderedJson::parse(schema)).grammar, text);
}

}  // namespace

TEST(GrammarParse, ErrorsNameLineColumnAndWhat) {
  EXPECT_EQ(parse_error("root ::= \"a\" ("), "grammar: line 1, column 15: expected ')' to close the group opened at line 1, column 14, found the end of the grammar");
  EXPECT_EQ(parse_error("root ::= [a-"), "grammar: line 1, column 10: unterminated character class (no closing ']')");
  EXPECT_EQ(parse_error("root ::= \"abc"), "grammar: line 1, column 10: unterminated string literal");
  EXPECT_EQ(parse_error("root ::= x\n\nx ::= foo"), "grammar: line 3, column 7: rule 'foo' is used but never defined");
  EXPECT_EQ(parse_error("start ::= \"a\""), "grammar: there is no rule named 'root' (the start of the grammar)");
  EXPECT_EQ(parse_error("root ::= \"a\"\nroot ::= \"b\""), "grammar: line 2, column 1: rule 'root' is defined twice");
  EXPECT_EQ(parse_error("root ::= \"\\q\""), "grammar: line 1, column 11: unknown escape '\\q'");
  EXPECT_EQ(parse_error("root ::= * \"a\""), "grammar: line 1, column 10: '*' has nothing before it to repeat");
  EXPECT_EQ(parse_error("root \"a\""), "grammar: line 1, column 6: expected '::=' after rule name 'root', found '\"'");
  EXPECT_EQ(parse_error("root ::= [z-a]"), "grammar: line 1, column 11: character range U+007A-U+0061 is reversed");
  EXPECT_EQ(parse_error("root ::= \"a\"{3,2}"), "grammar: line 1, column 13: repetition {3,2} has its maximum below its minimum");
  EXPECT_EQ(parse_error("root ::= \"a\"{5000}"), "grammar: line 1, column 14: repetition count over the limit of 2000");
  EXPECT_EQ(parse_error("root ::= \"a\" )"), "grammar: line 1, column 14: unexpected ')' in rule 'root'");
  EXPECT_EQ(parse_error("root ::= \"\\xZZ\""), "grammar: line 1, column 13: expected 2 hex digits in the escape, found 'Z'");
  EXPECT_EQ(parse_error("root ::= \"\\uD800\""), "grammar: line 1, column 11: U+D800 is not a Unicode scalar value");
  EXPECT_EQ(parse_error("root ::= \"\xff\""), "grammar: line 1, column 11: invalid UTF-8 in the grammar");
  // Left recursion (and a repetition of something that can be empty) would loop the matcher.
  EXPECT_EQ(parse_error("root ::= x\nx ::= x \"a\" | \"b\""),
            "grammar: rule 'x' can reach itself without consuming a character (left recursion, or a repetition of something that can be empty)");
  EXPECT_NE(parse_error("root ::= (\"a\"?)*").find("can reach itself without consuming"), std::string::npos);
  // Columns count characters, not bytes.
  EXPECT_EQ(parse_error("root ::= \"é\" ]"), "grammar: line 1, column 14: unexpected ']' in rule 'root'");
}

TEST(GrammarParse, HostileSizesAreBounded) {
  std::string deep(100, '(');
  EXPECT_EQ(parse_error("root ::= " + deep), "grammar: line 1, column 74: groups nest deeper than 64");
  // Nested repetitions refer to a rule, so they grow linearly, not exponentially...
  EXPECT_EQ(parse_error("root ::= (((\"a\"{2000}){2000}){2000})"), "(parsed)");
  // ...but the element budget still holds.
  GbnfLimits small;
  small.max_elements = 1000;
  EXPECT_THROW(parse_gbnf("root ::= \"a\"{999} \"b\"{999}", small), Error);
  EXPECT_THROW(parse_gbnf(std::string(2 << 20, ' ')), Error);
}

TEST(GrammarAccept, HandCheckedStrings) {
  EXPECT_TRUE(accepts("root ::= \"a\" | \"b\"", "b"));
  EXPECT_FALSE(accepts("root ::= \"a\" | \"b\"", "ab"));
  EXPECT_FALSE(accepts("root ::= \"a\" | \"b\"", ""));
  EXPECT_TRUE(accepts("root ::= [a-z]+ \"!\"", "hello!"));
  EXPECT_FALSE(accepts("root ::= [a-z]+ \"!\"", "!"));
  EXPECT_TRUE(accepts("root ::= [a-z]* \"!\"", "!"));
  EXPECT_TRUE(accepts("root ::= [a-z]{2,3}", "abc"));
  EXPECT_FALSE(accepts("root ::= [a-z]{2,3}", "abcd"));
  EXPECT_FALSE(accepts("root ::= [a-z]{2,3}", "a"));
  EXPECT_TRUE(accepts("root ::= \"ab\"{2,}", "ababab"));
  EXPECT_FALSE(accepts("root ::= \"ab\"{2,}", "ab"));
  EXPECT_TRUE(accepts("root ::= \"x\"{3}", "xxx"));
  EXPECT_TRUE(accepts("root ::= (\"ab\"? \"c\")*", "abccabc"));
  EXPECT_FALSE(accepts("root ::= (\"ab\"? \"c\")*", "abcab"));
  EXPECT_TRUE(accepts("root ::= [^\"]* \"\\\"\"", "h\xc3\xa9llo\""));  // héllo"
  EXPECT_FALSE(accepts("root ::= [^\"]* \"\\\"\"", "a\"b\""));
  EXPECT_TRUE(accepts("root ::= . . .", "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e"));  // 日本語: three characters
  EXPECT_FALSE(accepts("root ::= . .", "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e"));
  EXPECT_TRUE(accepts("root ::= [\\u00e0-\\u00ff]", "\xc3\xa9"));
  EXPECT_FALSE(accepts("root ::= .", "\xc3"));        // an incomplete character is not one
  EXPECT_FALSE(accepts("root ::= .", "\xc0\x80"));    // nor is an overlong one
  EXPECT_TRUE(accepts("root ::= \"\\x41\\t\\n\\\\\"", "A\t\n\\"));
  // Nesting: balanced parentheses (a context-free language, not a regular one).
  const char* parens = "root ::= x\nx ::= \"(\" x \")\" x | \"\"";
  EXPECT_TRUE(accepts(parens, "(()())()"));
  EXPECT_FALSE(accepts(parens, "(()"));
  EXPECT_FALSE(accepts(parens, "())("));
  // Rules over several lines: a newline ends a rule unless the next line goes on with it.
  EXPECT_TRUE(accepts("root ::=\n  \"a\"\n  | \"b\" # comment\n\nother ::= \"c\"", "b"));
  EXPECT_TRUE(accepts("root ::= (\n  \"a\"\n  \"b\"\n)", "ab"));
  // The rule that ends right recursion runs in constant stack.
  EXPECT_TRUE(accepts("root ::= x\nx ::= \"a\" x | \"a\"", std::string(20000, 'a')));
}

TEST(GrammarAccept, JsonObjectMode) {
  const Grammar& g = *json_object().grammar;
  EXPECT_TRUE(grammar_accepts(g, R"({"a": [1, 2.5e3, -0, "x\n\u00e9", true, null, {}], "b":{}})"));
  EXPECT_TRUE(grammar_accepts(g, "{}"));
  EXPECT_TRUE(grammar_accepts(g, "{\n  \"k\": \"v\"\n}"));
  EXPECT_FALSE(grammar_accepts(g, "[]"));           // an object, not any value
  EXPECT_FALSE(grammar_accepts(g, R"({"a": 01})"));  // JSON has no leading zeros
  EXPECT_FALSE(grammar_accepts(g, R"({"a": 1,})"));
  EXPECT_FALSE(grammar_accepts(g, "{\"a\": \"\x01\"}"));  // control characters must be escaped
  EXPECT_FALSE(grammar_accepts(g, R"({'a': 1})"));
}

TEST(JsonSchema, ObjectsRequiredAndOptionalInOrder) {
  const char* s = R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}},"required":["b"]})";
  EXPECT_TRUE(schema_accepts(s, R"({"a": 1, "b": "x"})"));
  EXPECT_TRUE(schema_accepts(s, R"({"b": "x", "c": true})"));
  EXPECT_TRUE(schema_accepts(s, R"({"b":""})"));
  EXPECT_FALSE(schema_accepts(s, R"({"a": 1})"));           // b is required
  EXPECT_FALSE(schema_accepts(s, R"({"b": "x", "d": 1})"));  // additionalProperties false by default
  EXPECT_FALSE(schema_accepts(s, R"({"a": "1", "b": "x"})"));
  EXPECT_FALSE(schema_accepts(s, R"({"b": "x",})"));
  EXPECT_TRUE(schema_accepts(R"({"type":"object","properties":{"a":{}}})", "{}"));
  const char* extra = R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"null"}})";
  EXPECT_TRUE(schema_accepts(extra, R"({"a": 1, "z": null, "y": null})"));
  EXPECT_FALSE(schema_accepts(extra, R"({"a": 1, "z": 2})"));
  EXPECT_TRUE(schema_accepts(R"({"type":"object"})", R"({"any": [1, {"thing": "x"}]})"));
}

TEST(JsonSchema, ArraysEnumsConstAnyOfRefs) {
  const char* arr = R"({"type":"array","items":{"enum":["x",1,null]},"minItems":2,"maxItems":3})";
  EXPECT_TRUE(schema_accepts(arr, R"(["x", null])"));
  EXPECT_TRUE(schema_accepts(arr, R"([1,1,1])"));
  EXPECT_FALSE(schema_accepts(arr, R"(["x"])"));
  EXPECT_FALSE(schema_accepts(arr, R"([1,1,1,1])"));
  EXPECT_FALSE(schema_accepts(arr, R"(["y", 1])"));
  EXPECT_TRUE(schema_accepts(R"({"type":"array","maxItems":0})", "[]"));
  EXPECT_TRUE(schema_accepts(R"({"const":{"a":[1,"\u00e9"]}})", "{\"a\":[1,\"\xc3\xa9\"]}"));
  EXPECT_TRUE(schema_accepts(R"({"type":["string","null"]})", "null"));
  EXPECT_FALSE(schema_accepts(R"({"type":["string","null"]})", "1"));
  const char* any = R"({"anyOf":[{"type":"integer"},{"type":"string","maxLength":1}]})";
  EXPECT_TRUE(schema_accepts(any, "-12"));
  EXPECT_TRUE(schema_accepts(any, "\"a\""));
  EXPECT_FALSE(schema_accepts(any, "\"ab\""));
  EXPECT_TRUE(schema_accepts(R"({"oneOf":[{"type":"boolean"}]})", "false"));
  const char* list = R"({"$defs":{"n":{"type":"object","properties":{"next":{"anyOf":[{"$ref":"#/$defs/n"},{"type":"null"}]}},"required":["next"]}},"$ref":"#/$defs/n"})";
  EXPECT_TRUE(schema_accepts(list, R"({"next":{"next":{"next":null}}})"));
  EXPECT_FALSE(schema_accepts(list, R"({"next":{}})"));
  EXPECT_TRUE(schema_accepts(R"({"definitions":{"a b":{"type":"null"}},"items":{"$ref":"#/definitions/a b"}})", "[null]"));
}

TEST(JsonSchema, StringsLengthsAndFormats) {
  const char* len = R"({"type":"string","minLength":2,"maxLength":3})";
  EXPECT_TRUE(schema_accepts(len, R"("ab")"));
  EXPECT_TRUE(schema_accepts(len, "\"\xc3\xa9\\n\\u0041\""));  // lengths count characters, escapes as one
  EXPECT_FALSE(schema_accepts(len, R"("abcd")"));
  EXPECT_FALSE(schema_accepts(len, R"("a")"));
  EXPECT_TRUE(schema_accepts(R"({"type":"string","format":"date"})", R"("2024-02-29")"));
  EXPECT_FALSE(schema_accepts(R"({"type":"string","format":"date"})", R"("2024-13-01")"));
  EXPECT_FALSE(schema_accepts(R"({"type":"string","format":"date"})", R"("2023-02-29")"));  // not a leap year
  EXPECT_TRUE(schema_accepts(R"({"type":"string","format":"date"})", R"("2000-02-29")"));
  EXPECT_FALSE(schema_accepts(R"({"type":"string","format":"date"})", R"("1900-02-29")"));
  EXPECT_FALSE(schema_accepts(R"({"type":"string","format":"date"})", R"("2024-04-31")"));
  EXPECT_FALSE(schema_accepts(R"({"type":"string","format":"date"})", R"("0000-01-01")"));
  EXPECT_TRUE(schema_accepts(R"({"type":"string","format":"time"})", R"("23:59:59.5+01:00")"));
  EXPECT_TRUE(schema_accepts(R"({"type":"string","format":"date-time"})", R"("2024-01-31T12:00:00Z")"));
  EXPECT_FALSE(schema_accepts(R"({"type":"string","format":"date-time"})", R"("2024-01-31 12:00:00Z")"));
  EXPECT_TRUE(schema_accepts(R"({"type":"string","format":"uuid"})", R"("123e4567-e89b-12d3-a456-426614174000")"));
  EXPECT_FALSE(schema_accepts(R"({"type":"string","format":"uuid"})", R"("123e4567e89b12d3a456426614174000")"));
  EXPECT_TRUE(schema_accepts(R"({"type":"number"})", "-1.5e-7"));
  EXPECT_FALSE(schema_accepts(R"({"type":"integer"})", "1.5"));
}

TEST(JsonSchema, UnsupportedIsRefusedByName) {
  EXPECT_EQ(schema_error(R"({"type":"object","patternProperties":{}})"), "json_schema: keyword 'patternProperties' is not supported (at #)");
  EXPECT_EQ(schema_error(R"({"type":"string","pattern":"^a$"})"), "json_schema: keyword 'pattern' is not supported (at #)");
  EXPECT_EQ(schema_error(R"({"type":"integer","minimum":0})"), "json_schema: keyword 'minimum' is not supported (at #)");
  EXPECT_EQ(schema_error(R"({"properties":{"a":{"allOf":[]}}})"), "json_schema: keyword 'allOf' is not supported (at #/properties/a)");
  EXPECT_EQ(schema_error(R"({"type":"string","format":"email"})"), "json_schema: format 'email' is not supported (at #)");
  EXPECT_EQ(schema_error(R"({"$ref":"https://example.com/s.json"})"),
            "json_schema: #: $ref 'https://example.com/s.json' is not supported (only #/$defs/NAME and #/definitions/NAME)");
  EXPECT_EQ(schema_error(R"({"$ref":"#/$defs/missing"})"), "json_schema: #: $ref '#/$defs/missing' points to nothing");
  EXPECT_EQ(schema_error(R"({"type":"object","properties":{},"required":["x"]})"),
            "json_schema: #: required property 'x' is not in 'properties'");
  EXPECT_EQ(schema_error(R"({"type":"strin"})"), "json_schema: #: unknown type 'strin'");
  EXPECT_EQ(schema_error(R"({"type":"array","items":[{}]})"), "json_schema: #: 'items' as an array (tuple form) is not supported");
  EXPECT_EQ(schema_error(R"({"type":"array","maxItems":1,"minItems":2})"), "json_schema: #: 'maxItems' is below 'minItems'");
  EXPECT_EQ(schema_error("false"), "json_schema: #: the schema false allows nothing");
  EXPECT_EQ(schema_error("[]"), "json_schema: #: a schema must be an object or a boolean");
  // Annotations change nothing and are accepted.
  EXPECT_EQ(schema_error(R"({"title":"t","description":"d","$schema":"x","type":"null","default":null})"), "(compiled)");
}

TEST(JsonSchema, HostileSchemasAreBounded) {
  std::string deep = "{}";
  for (int i = 0; i < 100; i++) deep = R"({"type":"array","items":)" + deep + "}";
  EXPECT_NE(schema_error(deep).find(": schemas nest deeper than 64"), std::string::npos);
  std::string many = R"({"type":"object","properties":{)";
  for (int i = 0; i < 300; i++) many += fmt::format("{}\"p{}\":{{}}", i ? "," : "", i);
  EXPECT_EQ(schema_error(many + "}}"), "json_schema: #: more than 256 properties");
  EXPECT_EQ(schema_error(R"({"type":"string","maxLength":100000})"), "json_schema: #: 'maxLength' over 2000 is not supported");
}

// Nested repetition of a recursive rule (the shape of a grammar the fuzzer found) stays inside the
// frame, state and stack-set limits, yet its closure doubles with every letter: ~75 ms per new
// state at the stack-set limit on 26 letters, ~0.5 s on a byte vocabulary, and a real vocabulary
// makes a new state per token (the fuzzer's input ran 87 s for 16 tokens, stalling the engine
// step of every sequence). Refused after a bounded number of closure steps, with an error that
// says why. (A JSON schema's grammar takes under 10,000 steps per token: runtime_grammar_generate
// runs them at these defaults.)
TEST(GrammarMatcher, AnExplosivelyAmbiguousGrammarIsRefusedInBoundedSteps) {
  auto g = std::make_shared<const Grammar>(parse_gbnf("root ::= [a-z] (root+)*"));
  std::vector<std::string> pieces;
  for (char c = 'a'; c <= 'z'; c++) pieces.push_back(std::string(1, c));
  pieces.push_back("");  // EOS
  auto vocab = std::make_shared<const TokenTrie>(TokenTrie::build(pieces, {26}));
  auto walk = [&](const MatcherLimits& lim, int tokens) -> std::string {
    GrammarMatcher m(g, vocab, lim);
    try {
      for (int i = 0; i < tokens; i++) {
        m.allowed();
        if (!m.accept(i % 26)) return "refused a letter";
      }
    } catch (const Error& e) {
      return e.what();
    }
    return "(walked)";
  };
  EXPECT_EQ(walk({}, 64), "grammar: the matcher needs more than 1048576 steps for one token (the grammar is too ambiguous)");
  MatcherLimits lifetime;
  lifetime.max_steps_per_call = 1 << 30;
  lifetime.max_steps = 1 << 21;
  EXPECT_EQ(walk(lifetime, 64), "grammar: the matcher needs more than 2097152 steps in all (the grammar is too ambiguous)");
  EXPECT_EQ(walk({}, 3), "(walked)");  // the first letters are cheap: the limit is not hit by any grammar
}

// Errors quote at most a short prefix of what they name (fuzz_grammar: a 359-character rule name
// came back whole), however long the rule name, keyword, type, $ref, format or property path.
TEST(GrammarErrors, QuoteOnlyAShortPrefixOfTheInput) {
  const std::string longname(5000, 'w');
  for (const std::string& gbnf : {longname + " : \"a\"", "root ::= " + longname, "root ::= \"a\"\n" + longname + " ::= \"b\"\n" + longname + " ::= \"c\"",
                                   "root ::= " + longname + "\n" + longname + " ::= " + longname + " \"a\""}) {
    std::string e = parse_error(gbnf);
    EXPECT_LT(e.size(), 300u) << e.substr(0, 300);
    EXPECT_NE(e.find("grammar: "), std::string::npos) << e.substr(0, 300);
  }
  const std::string p = "p" + std::string(5000, 'x');
  for (const std::string& schema :
       {R"({")" + p + R"(":1})", R"({"type":")" + p + R"("})", R"({"$ref":"#/$defs/)" + p + R"("})", R"({"type":"string","format":")" + p + R"("})",
        R"({"properties":{")" + p + R"(":{"type":"nope"}}})", R"({"properties":{"a":{}},"required":[")" + p + R"("]})",
        R"({"properties":{")" + p + R"(":{"pattern":"x"}}})"}) {
    std::string e = schema_error(schema);
    EXPECT_LT(e.size(), 300u) << e.substr(0, 300);
    EXPECT_EQ(e.rfind("json_schema: ", 0), 0u) << e.substr(0, 300);
  }
}
