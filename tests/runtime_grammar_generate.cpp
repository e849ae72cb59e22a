// The structured-output guarantee: under a constraint, generation from RANDOM weights (the worst
// case: a model with no idea of JSON) always ends with text that parses and validates against the
// schema. Many seeds, every tokenizer family; validated by Python's json + jsonschema
// (tests/support/validate_json_schema.py), never by kvad's own grammar code.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "fixture_tokenizer.h"
#include "grammar/matcher.h"
#include "models/synth.h"
#include "runtime/engine.h"
#include "runtime/generate.h"
#include "runtime/loader.h"
#include "test_support.h"

using namespace kvad;

namespace {

// Bounded (maxLength, maxItems) so that a model that never wants to stop still must: the
// grammar's longest sentence is a few hundred characters.
const char* const kSchemas[] = {
    R"({"type":"object","properties":{
        "name":{"type":"string","maxLength":12},
        "age":{"type":"integer"},
        "score":{"type":"number"},
        "ok":{"type":"boolean"},
        "tag":{"enum":["red","green",3,null]},
        "nick":{"anyOf":[{"type":"string","maxLength":6},{"type":"null"}]},
        "tags":{"type":"array","items":{"type":"string","maxLength":5},"minItems":1,"maxItems":3},
        "where":{"type":"object","properties":{"x":{"type":"number"},"y":{"type":"number"}},"required":["x"]}},
      "required":["name","age","tags"]})",
    R"({"$defs":{"item":{"type":"object","properties":{"id":{"type":"string","format":"uuid"},
        "day":{"type":"string","format":"date"},"at":{"type":"string","format":"date-time"},
        "n":{"const":7}},"required":["id","day","at","n"]}},
      "type":"array","items":{"$ref":"#/$defs/item"},"maxItems":2})",
    R"({"type":["integer","null","boolean"]})",
};

bool have_validator() {
  return std::system("/usr/bin/python3 -c 'import jsonschema' >/dev/null 2>&1") == 0;
}

// One line per (schema, text): "ok" or "FAIL: why".
std::vector<std::string> validate(const std::vector<std::pair<std::string, std::string>>& cases) {
  std::string dir = test::temp_dir("grammar-validate");
  std::string in = dir + "/cases.jsonl", out = dir + "/verdicts.txt";
  {
    std::ofstream f(in);
    for (const auto& [schema, text] : cases)
      f << Json{{"schema", Json::parse(schema)}, {"text", text}}.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
  }
  std::string cmd = "/usr/bin/python3 " + test::source_path("tests/support/validate_json_schema.py") + " " + in + " > " + out;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(out);
  std::vector<std::string> lines;
  for (std::string l; std::getline(f, l);) lines.push_back(l);
  return lines;
}

void expect_all_valid(const std::vector<std::pair<std::string, std::string>>& cases) {
  std::vector<std::string> verdicts = validate(cases);
  ASSERT_EQ(verdicts.size(), cases.size());
  for (size_t i = 0; i < cases.size(); i += cases.size() / 3)  // a few for the reader of the log
    std::printf("sample: %s\n", cases[i].second.c_str());
  for (size_t i = 0; i < cases.size(); i++)
    EXPECT_EQ(verdicts[i], "ok") << "text: " << cases[i].second << "\nschema: " << cases[i].first;
}

LoadedModel synth_model(const std::string& arch) {
  SynthOptions o;
  o.arch = arch;
  o.preset = "tiny";
  o.std = 0.1;
  o.dtype = DType::F32;
  o.out = test::temp_dir("grammar-" + arch);
  SynthResult r = synthesize(o);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(test::source_path("tests/fixtures/tokenizers/" + r.tokenizer + "/" + f), o.out + "/" + f,
                               std::filesystem::copy_options::overwrite_existing);
  return load_model(o.out, {});
}

GenerateOptions constrained(const std::string& schema, uint64_t seed, std::shared_ptr<const grammar::TokenTrie> vocab,
                            std::vector<int32_t> eos) {
  GenerateOptions g;
  g.sampling.temperature = 1.0f;
  g.sampling.seed = seed;
  g.max_tokens = 2000;
  g.stop_ids = std::move(eos);
  g.constraint = grammar::compile_json_schema(OrderedJson::parse(schema));
  g.constraint_vocab = std::move(vocab);
  return g;
}

// A request for the engine's step loop whose result (or error) lands in `done` (or `errors`).
GenerationRequest collected(const LoadedModel& m, const std::vector<int32_t>& prompt, GenerateOptions o, int64_t n,
                            std::vector<GenerateResult>& done, std::vector<std::string>& errors) {
  GenerationRequest r;
  r.prompt = prompt;
  r.opts = std::move(o);
  r.n = n;
  r.tokenizer = m.tokenizer.get();
  r.on_token = [](const TokenEvent&) { return true; };
  r.on_done = [&done, &errors](GenerateResult&& res, const std::string& err) {
    if (err.empty()) done.push_back(std::move(res));
    else errors.push_back(err);
  };
  return r;
}

// A random tiny GPT-2 in an engine that runs up to 4 sequences at once, with its grammar vocabulary.
struct SmallEngine {
  LoadedModel m = synth_model("gpt2");
  Engine engine{*m.model, [] {
                  EngineOptions eo;
                  eo.max_running = 4;
                  return eo;
                }()};
  std::shared_ptr<const grammar::TokenTrie> vocab = grammar_vocab(*m.tokenizer, m.eos_ids);
};

}  // namespace

class GrammarOnRandomModel : public ::testing::TestWithParam<const char*> {};

TEST_P(GrammarOnRandomModel, OutputAlwaysValidatesAgainstTheSchema) {
  ASSERT_TRUE(have_validator()) << "the check needs /usr/bin/python3 with jsonschema (apt-get install python3-jsonschema; scripts/install-deps.sh does)";
  LoadedModel m = synth_model(GetParam());
  Engine engine(*m.model, EngineOptions{});
  auto vocab = grammar_vocab(*m.tokenizer, m.eos_ids);
  std::vector<int32_t> prompt = m.tokenizer->encode("Reply in JSON:");
  std::vector<std::pair<std::string, std::string>> cases;
  for (const char* schema : kSchemas)
    for (uint64_t seed = 0; seed < 6; seed++) {
      auto session = engine.open_session();
      GenerateResult r = generate(*session, *m.tokenizer, prompt, constrained(schema, seed, vocab, m.eos_ids),
                                  [](const TokenEvent&) { return true; });
      EXPECT_EQ(r.finish_reason, "stop") << r.text;
      cases.push_back({schema, r.text});
    }
  expect_all_valid(cases);
}

INSTANTIATE_TEST_SUITE_P(Families, GrammarOnRandomModel, ::testing::Values("qwen2", "llama", "gpt2"));

// Tokenizer families without a synthesized model of their vocabulary (SentencePiece with byte
// fallback, Unigram): the generation loop itself with random logits, which is what a random
// model gives it.
class GrammarOnRandomLogits : public ::testing::TestWithParam<const char*> {};

TEST_P(GrammarOnRandomLogits, OutputAlwaysValidatesAgainstTheSchema) {
  ASSERT_TRUE(have_validator()) << "the check needs /usr/bin/python3 with jsonschema (apt-get install python3-jsonschema; scripts/install-deps.sh does)";
  Tokenizer tok = test::load_fixture_tokenizer(GetParam());
  std::vector<int32_t> eos;
  if (tok.eos_id()) eos.push_back(*tok.eos_id());
  auto vocab = grammar_vocab(tok, eos);
  const int64_t V = tok.vocab_size();
  std::vector<std::pair<std::string, std::string>> cases;
  for (const char* schema : kSchemas)
    for (uint64_t seed = 0; seed < 15; seed++) {
      TokenGenerator gen(tok, {1}, constrained(schema, seed, vocab, eos));
      std::mt19937 rng((uint32_t)seed);
      std::normal_distribution<float> normal(0.0f, 3.0f);
      std::vector<float> logits((size_t)V);
      TokenEvent ev;
      bool end = false;
      for (int step = 0; step < 2000 && !end; step++) {
        for (float& l : logits) l = normal(rng);
        end = gen.next(logits.data(), V, ev);
      }
      std::string rest = gen.flush();
      EXPECT_EQ(gen.result().finish_reason, "stop") << gen.result().text;
      cases.push_back({schema, gen.result().text});
    }
  expect_all_valid(cases);
}

INSTANTIATE_TEST_SUITE_P(Families, GrammarOnRandomLogits, ::testing::Values("qwen3", "llama3", "gpt2", "llama2", "unigram"));

// The matcher's other promises, checked on the real Qwen vocabulary.
TEST(GrammarMatcher, EosOnlyWhenCompleteAndOnlyEosWhenNothingElseFits) {
  Tokenizer tok = test::load_fixture_tokenizer("qwen3");
  const int32_t eos = *tok.eos_id();
  auto vocab = grammar_vocab(tok, {eos});
  grammar::GrammarMatcher m(grammar::compile_gbnf("root ::= \"ab\" \"c\"?").grammar, vocab);
  auto allowed = [&](int32_t t) { return (m.allowed()[(size_t)t >> 6] >> (t & 63)) & 1; };
  EXPECT_FALSE(allowed(eos));
  EXPECT_FALSE(m.accept(eos));
  int32_t ab = *tok.token_id("ab");
  EXPECT_TRUE(allowed(ab));
  EXPECT_TRUE(m.accept(ab));
  EXPECT_TRUE(allowed(eos));  // "ab" is complete, "abc" would be too
  EXPECT_FALSE(m.finished());
  EXPECT_TRUE(m.accept(*tok.token_id("c")));
  EXPECT_TRUE(m.finished());
  size_t open = 0;
  for (uint64_t w : m.allowed()) open += (size_t)__builtin_popcountll(w);
  EXPECT_EQ(open, 1u);  // EOS alone
  EXPECT_TRUE(allowed(eos));
  // Special tokens never fit a grammar; a token whose bytes do not fit is refused.
  grammar::GrammarMatcher any(grammar::compile_gbnf("root ::= .*").grammar, vocab);
  EXPECT_FALSE(any.accept(*tok.token_id("<|im_start|>")));
  grammar::GrammarMatcher digits(grammar::compile_gbnf("root ::= [0-9]+").grammar, vocab);
  EXPECT_FALSE(digits.accept(ab));
  EXPECT_TRUE(digits.accept(*tok.token_id("7")));
}

TEST(GrammarMatcher, TokensEndingInsideACharacterAreTracked) {
  // Llama 2's byte-fallback tokens spell one UTF-8 byte each: "é" = <0xC3> <0xA9>.
  Tokenizer tok = test::load_fixture_tokenizer("llama2");
  auto vocab = grammar_vocab(tok, {});
  grammar::GrammarMatcher m(grammar::compile_gbnf("root ::= [\\u00e0-\\u00ff] \"!\"").grammar, vocab);
  EXPECT_FALSE(m.accept(*tok.token_id("<0xC2>")));  // U+0080-U+00BF: none in the class
  EXPECT_TRUE(m.accept(*tok.token_id("<0xC3>")));
  EXPECT_FALSE(m.accepting());
  EXPECT_FALSE(m.accept(*tok.token_id("!")));  // the character is not complete
  EXPECT_TRUE(m.accept(*tok.token_id("<0xA9>")));
  EXPECT_TRUE(m.accept(*tok.token_id("!")));
  EXPECT_TRUE(m.accepting());
}

// Through the engine's step loop (what the server runs): the n = 3 choices of one constrained
// request, each with its own matcher, and an unconstrained request beside them.
TEST(GrammarOnEngine, ChoicesOfAConstrainedRequestEachValidate) {
  ASSERT_TRUE(have_validator()) << "the check needs /usr/bin/python3 with jsonschema (apt-get install python3-jsonschema; scripts/install-deps.sh does)";
  SmallEngine small;
  const LoadedModel& m = small.m;
  Engine& engine = small.engine;
  const auto& vocab = small.vocab;
  std::vector<int32_t> prompt = m.tokenizer->encode("JSON:");
  std::vector<GenerateResult> constrained_done, free_done;
  std::vector<std::string> errors;
  engine.submit(collected(m, prompt, constrained(kSchemas[0], 5, vocab, m.eos_ids), 3, constrained_done, errors));
  GenerateOptions free = constrained(kSchemas[2], 1, vocab, m.eos_ids);
  free.constraint = {};
  free.max_tokens = 20;
  engine.submit(collected(m, prompt, free, 1, free_done, errors));
  for (int i = 0; i < 100000 && engine.has_work(); i++) engine.step();
  EXPECT_TRUE(errors.empty()) << errors[0];
  ASSERT_EQ(constrained_done.size(), 3u);
  EXPECT_EQ(free_done.size(), 1u);
  std::vector<std::pair<std::string, std::string>> cases;
  for (const GenerateResult& r : constrained_done) {
    EXPECT_EQ(r.finish_reason, "stop");
    cases.push_back({kSchemas[0], r.text});
  }
  expect_all_valid(cases);
}

// A constraint past its matcher's limits (here the closure steps of an explosively ambiguous
// grammar, tests/runtime_grammar.cpp) ends its own sequence with the error, in the engine's step
// loop; a request beside it runs to its end.
TEST(GrammarOnEngine, AGrammarPastItsLimitsEndsOnlyItsOwnSequence) {
  SmallEngine small;
  const LoadedModel& m = small.m;
  Engine& engine = small.engine;
  const auto& vocab = small.vocab;
  std::vector<int32_t> prompt = m.tokenizer->encode("Letters:");
  std::vector<std::string> errors;
  std::vector<GenerateResult> done;
  GenerateOptions hostile;
  hostile.max_tokens = 64;
  hostile.stop_ids = m.eos_ids;
  hostile.constraint = grammar::compile_gbnf("root ::= [a-z] (root+)*");
  hostile.constraint_vocab = vocab;
  engine.submit(collected(m, prompt, hostile, 1, done, errors));
  GenerateOptions plain;
  plain.max_tokens = 24;
  plain.stop_ids = {};  // runs to max_tokens
  engine.submit(collected(m, prompt, plain, 1, done, errors));
  for (int i = 0; i < 1000 && engine.has_work(); i++) engine.step();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("the grammar is too ambiguous"), std::string::npos) << errors[0];
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].tokens.size(), 24u);
  EXPECT_EQ(done[0].finish_reason, "length");
}
