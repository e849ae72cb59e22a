// The Jinja engine against Python's Jinja2: every snippet in chat_goldens/jinja_features.json
// (written by tools/make_chat_goldens.py) must render byte for byte as Jinja2 rendered it, or
// fail where Jinja2 failed. Plus the guards: errors name the template and line, and hostile
// templates end with an error instead of a crash or a hang.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "test_support.h"
#include "tokenizer/jinja.h"

using namespace kvad;
using namespace kvad::jinja;

namespace {

nlohmann::ordered_json load(const std::string& rel) {
  std::ifstream f(test::source_path(rel), std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return nlohmann::ordered_json::parse(ss.str());
}

RenderOptions fixed_now() {
  RenderOptions o;
  std::tm tm{};
  tm.tm_year = 2025 - 1900;
  tm.tm_mon = 2;
  tm.tm_mday = 14;
  tm.tm_hour = 9;
  tm.tm_min = 26;
  tm.tm_sec = 53;
  tm.tm_wday = 5;  // Friday
  tm.tm_yday = 72;
  o.now = tm;
  return o;
}

std::string render(const std::string& src, const std::vector<std::pair<std::string, Value>>& vars = {},
                   const RenderOptions& opts = RenderOptions()) {
  return Template(src, "t").render(vars, opts);
}

std::string render_error_of(const std::string& src, const RenderOptions& opts = RenderOptions()) {
  try {
    render(src, {}, opts);
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

TEST(Jinja, MatchesPythonJinja2OnFeatureSnippets) {
  auto cases = load("tests/fixtures/chat_goldens/jinja_features.json");
  ASSERT_GT(cases.size(), 100u);
  RenderOptions opts = fixed_now();
  int checked = 0;
  for (const auto& c : cases) {
    std::string name = c["name"];
    std::vector<std::pair<std::string, Value>> vars;
    for (auto it = c["vars"].begin(); it != c["vars"].end(); ++it) vars.emplace_back(it.key(), from_json(it.value()));
    if (c.contains("expected")) {
      try {
        EXPECT_EQ(render(c["template"], vars, opts), c["expected"].get<std::string>()) << name;
      } catch (const Error& e) {
        ADD_FAILURE() << name << ": unexpected error " << e.what();
      }
    } else {
      EXPECT_THROW(render(c["template"], vars, opts), Error) << name << " (Python: " << c["error"] << ")";
    }
    ++checked;
  }
  EXPECT_EQ(checked, int(cases.size()));
}

TEST(Jinja, ErrorsNameTemplateAndLine) {
  EXPECT_EQ(render_error_of("line1\n{{ 1|nosuch }}"), "t:2: No filter named 'nosuch'.");
  EXPECT_EQ(render_error_of("a\nb\n{% if x %}"), "t:3: unexpected end of template, expected 'elif' or 'else' or 'endif'");
  EXPECT_EQ(render_error_of("\n\n{{ raise_exception('bad roles') }}"), "t:3: raise_exception: bad roles");
  EXPECT_EQ(render_error_of("{% for m in [1] %}\n\n  {{ m.x.y }}{% endfor %}"), "t:3: 'int object' has no attribute 'x'");
  EXPECT_EQ(render_error_of("{{ undefined_thing + 1 }}"), "t:1: 'undefined_thing' is undefined");
  EXPECT_EQ(render_error_of("x\n{# open"), "t:2: Missing end of comment tag");
}

TEST(Jinja, PythonFloatRepr) {
  EXPECT_EQ(py_float_repr(1.0), "1.0");
  EXPECT_EQ(py_float_repr(0.1), "0.1");
  EXPECT_EQ(py_float_repr(1e16), "1e+16");
  EXPECT_EQ(py_float_repr(1.5e-5), "1.5e-05");
  EXPECT_EQ(py_float_repr(123456789012345678.0), "1.2345678901234568e+17");
  EXPECT_EQ(py_float_repr(-0.0), "-0.0");
  EXPECT_EQ(py_float_repr(0.0001), "0.0001");
  EXPECT_EQ(py_float_repr(1234.5), "1234.5");
  EXPECT_EQ(py_float_repr(9999999999999998.0), "9999999999999998.0");
}

TEST(Jinja, JsonDumpsLikePython) {
  DictObj d;
  d.set(Value("b"), Value::list({Value(1), Value(2.0), Value::none(), Value(true)}));
  d.set(Value("a"), Value("é\"\n\x01"));
  Value v = Value::dict(d);
  EXPECT_EQ(py_json_dumps(v, false, std::nullopt, ", ", ": ", false),
            "{\"b\": [1, 2.0, null, true], \"a\": \"é\\\"\\n\\u0001\"}");
  EXPECT_EQ(py_json_dumps(v, true, std::string("  "), ",", ": ", true),
            "{\n  \"a\": \"\\u00e9\\\"\\n\\u0001\",\n  \"b\": [\n    1,\n    2.0,\n    null,\n    true\n  ]\n}");
}

TEST(Jinja, InsertionOrderOfDictsIsKept) {
  DictObj d;
  d.set(Value("type"), Value("function"));
  d.set(Value("function"), Value("f"));
  EXPECT_EQ(render("{{ d|tojson }} {% for k in d %}{{ k }} {% endfor %}", {{"d", Value::dict(d)}}),
            "{\"type\": \"function\", \"function\": \"f\"} type function ");
}

TEST(Jinja, HostileTemplatesEndWithAnError) {
  RenderOptions small;
  small.max_output = 1 << 20;
  small.max_steps = 2'000'000;
  // Unbounded loops / output.
  EXPECT_NE(render_error_of("{% for a in range(100000) %}{% for b in range(100000) %}x{% endfor %}{% endfor %}", small), "<no error>");
  EXPECT_NE(render_error_of("{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", small), "<no error>");
  EXPECT_NE(render_error_of("{{ 'x' * 100000000 }}", small), "<no error>");
  EXPECT_NE(render_error_of("{{ [1] * 100000000 }}", small), "<no error>");
  // Recursion: macros calling themselves, deeply nested expressions and blocks.
  EXPECT_NE(render_error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"), "<no error>");
  EXPECT_NE(render_error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}"), "<no error>");
  std::string nested;
  for (int i = 0; i < 3000; ++i) nested += "{% if true %}";
  EXPECT_NE(render_error_of(nested), "<no error>");
  EXPECT_NE(render_error_of("{{ " + std::string(5000, '-') + "1 }}"), "<no error>");
  EXPECT_NE(render_error_of("{{ " + std::string(5000, '[') + " }}"), "<no error>");
  // Integer overflow is reported, not wrapped.
  EXPECT_NE(render_error_of("{{ 2 ** 100 }}"), "<no error>");
  EXPECT_NE(render_error_of("{{ 99999999999999999999 }}"), "<no error>");
  // A namespace that refers to itself renders (repr depth-guarded) without leaking.
  EXPECT_NE(render_error_of("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}"), "<no error>");
  EXPECT_EQ(render("{% set ns = namespace() %}{% set ns.me = ns %}ok"), "ok");
  // Nesting that would make destruction or printing recurse without bound.
  EXPECT_NE(render_error_of("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}"),
            "<no error>");
  std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_THROW(from_json(nlohmann::json::parse(deep, nullptr, true, false)), Error);
  for (size_t d : {510, 511, 512, 513}) {  // at the boundary: kvad::Error, never anything else
    std::string s = std::string(d, '[') + std::string(d, ']');
    try {
      from_json(nlohmann::json::parse(s));
    } catch (const Error&) {
    }
  }
  // A macro that outlives the loop iteration that defined it.
  EXPECT_NE(render_error_of("{% set ns = namespace() %}{% for i in [1] %}{% macro m() %}x{% endmacro %}"
                     "{% set ns.m = m %}{% endfor %}{{ ns.m() }}"),
            "<no error>");
}

TEST(Jinja, InvalidUtf8IsReplacedNotCrashing) {
  EXPECT_EQ(render("a\xff{{ 'b\xfe' }}"), "a\xEF\xBF\xBD" "b\xEF\xBF\xBD");
  EXPECT_EQ(render("{{ s|length }}", {{"s", from_json(nlohmann::json("x\xc3"))}}), "2");
}
