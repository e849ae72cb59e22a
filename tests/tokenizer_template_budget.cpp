// Chat templates arrive inside downloaded models: every operation that can allocate or loop
// charges one budget of steps and bytes, and a render has a time limit (issue 9). Each case here
// ran (near) forever or exhausted memory before: printing, JSON-encoding or comparing shared
// structure is exponential in its size; indexing a long string decoded all of it every time.
#include <gtest/gtest.h>

#include <chrono>

#include "core/error.h"
#include "tokenizer/jinja.h"

using namespace kvad;
using namespace kvad::jinja;

namespace {

// `ns.a` doubles 40 times over shared lists: 2^40 leaves, 41 lists held.
const char* kShared =
    "{% set ns = namespace(a=['x'], b=['x']) %}"
    "{% for i in range(40) %}{% set ns.a = [ns.a, ns.a] %}{% set ns.b = [ns.b, ns.b] %}{% endfor %}";

// A tenth of the default budget keeps the tests fast (also under the sanitizers); the defaults
// bound the same work ten times over.
RenderOptions small() {
  RenderOptions o;
  o.max_steps = 2'000'000;
  return o;
}

std::string budget_error_of(const std::string& src, const RenderOptions& o = small()) {
  try {
    Template t(src, "hostile.jinja");
    t.render({}, o);
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

void expect_budget_error(const std::string& src, const RenderOptions& o = small()) {
  auto t0 = std::chrono::steady_clock::now();
  std::string msg = budget_error_of(src, o);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(msg.rfind("hostile.jinja:", 0), 0u) << msg;  // names the template
  EXPECT_TRUE(msg.find("budget") != std::string::npos || msg.find("limit") != std::string::npos) << msg;
  EXPECT_LT(s, 8.0) << src;
}

}  // namespace

TEST(TemplateBudget, PrintingSharedStructure) {
  expect_budget_error(std::string(kShared) + "{{ ns.a }}");
  expect_budget_error(std::string(kShared) + "{{ ns.a | string | length }}");
}

TEST(TemplateBudget, TojsonOfSharedStructureAndLongSeparators) {
  expect_budget_error(std::string(kShared) + "{{ ns.a | tojson }}");
  expect_budget_error(std::string(kShared) + "{{ ns.a | tojson(indent=4096) }}");
  // A long separator string on a modest list: the bytes are charged as they are produced.
  RenderOptions o = small();
  o.max_output = 1 << 20;
  expect_budget_error("{% set sep = 'x' * 100000 %}{{ range(1000) | list | tojson(separators=(sep, sep)) }}", o);
  expect_budget_error("{% set ind = ' ' * 100000 %}{{ [[[[[[[[[[1]]]]]]]]]] | tojson(indent=ind) }}", o);
}

TEST(TemplateBudget, ComparingSharedStructure) {
  expect_budget_error(std::string(kShared) + "{{ ns.a == ns.b }}");
  expect_budget_error(std::string(kShared) + "{{ ns.a in [ns.b] }}");
}

TEST(TemplateBudget, StringIndexingAndSlicing) {
  expect_budget_error("{% set s = 'x' * 1000000 %}{% for i in range(100000) %}{{ s[i] }}{% endfor %}");
  expect_budget_error("{% set s = 'x' * 1000000 %}{% for i in range(100000) %}{{ s[i:i+1] }}{% endfor %}");
}

TEST(TemplateBudget, WallClockLimit) {
  RenderOptions o;
  o.max_steps = uint64_t(1) << 60;  // only the clock can stop it
  o.max_seconds = 0.3;
  auto t0 = std::chrono::steady_clock::now();
  std::string msg =
      budget_error_of("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}", o);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(msg.find("hostile.jinja"), std::string::npos) << msg;
  EXPECT_NE(msg.find("time limit"), std::string::npos) << msg;
  EXPECT_LT(s, 3.0);
}

TEST(TemplateBudget, OrdinaryTemplatesStillRender) {
  Template t("{% for m in messages %}<{{ m.role }}>{{ m.content[0:3] }}{{ m.content[0] }}{% endfor %}"
             "{{ messages | tojson(indent=2) | length > 0 }}{{ messages[0] == messages[0] }}",
             "ok.jinja");
  Value msgs = from_json(nlohmann::json::parse(R"([{"role":"user","content":"hello"},{"role":"assistant","content":"hi!"}])"));
  EXPECT_EQ(t.render({{"messages", msgs}}), "<user>helh<assistant>hi!hTrueTrue");
}
