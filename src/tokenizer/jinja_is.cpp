// Jinja2's builtin tests (`x is defined`, `x is string`, `n is divisibleby 3`, ...) with the
// semantics of jinja2/tests.py on Python values: bools are numbers and integers, Undefined is
// iterable, a sequence and callable, `mapping` means dict.
#include "tokenizer/jinja_ast.h"

namespace kvad::jinja::detail {

namespace {

bool cmp_test(Evaluator&, const Value& v, CallArgs& a, CmpOp op) {
  a.check(1, {"other"});
  Value o = a.get(0, "other");
  switch (op) {
    case CmpOp::Eq: return py_equals(v, o);
    case CmpOp::Ne: return !py_equals(v, o);
    default: break;
  }
  if (v.is_undefined() || o.is_undefined()) raise(0, "Undefined value used in a comparison");
  int c = py_compare(v, o);
  switch (op) {
    case CmpOp::Lt: return c < 0;
    case CmpOp::Le: return c <= 0;
    case CmpOp::Gt: return c > 0;
    default: return c >= 0;
  }
}
bool t_eq(Evaluator& ev, const Value& v, CallArgs& a) { return cmp_test(ev, v, a, CmpOp::Eq); }
bool t_ne(Evaluator& ev, const Value& v, CallArgs& a) { return cmp_test(ev, v, a, CmpOp::Ne); }
bool t_lt(Evaluator& ev, const Value& v, CallArgs& a) { return cmp_test(ev, v, a, CmpOp::Lt); }
bool t_le(Evaluator& ev, const Value& v, CallArgs& a) { return cmp_test(ev, v, a, CmpOp::Le); }
bool t_gt(Evaluator& ev, const Value& v, CallArgs& a) { return cmp_test(ev, v, a, CmpOp::Gt); }
bool t_ge(Evaluator& ev, const Value& v, CallArgs& a) { return cmp_test(ev, v, a, CmpOp::Ge); }

#define SIMPLE_TEST(fname, expr)                               \
  bool fname(Evaluator&, const Value& v, CallArgs& a) {        \
    a.check(0, {});                                            \
    return expr;                                               \
  }
SIMPLE_TEST(t_boolean, v.is_bool())
SIMPLE_TEST(t_callable, v.is_function() || v.is_undefined())  // Undefined has __call__
SIMPLE_TEST(t_defined, !v.is_undefined())
SIMPLE_TEST(t_undefined, v.is_undefined())
SIMPLE_TEST(t_none, v.is_none())
SIMPLE_TEST(t_true, v.is_bool() && v.as_bool())
SIMPLE_TEST(t_false, v.is_bool() && !v.as_bool())
SIMPLE_TEST(t_integer, v.is_int())
SIMPLE_TEST(t_float, v.is_float())
SIMPLE_TEST(t_number, v.is_number())
SIMPLE_TEST(t_string, v.is_string())
SIMPLE_TEST(t_mapping, v.is_dict())
SIMPLE_TEST(t_escaped, false)
// Undefined is iterable (empty) and a sequence (len 0, __getitem__) in Jinja2.
SIMPLE_TEST(t_iterable, v.is_undefined() || v.is_string() || v.is_list() || v.is_dict())
SIMPLE_TEST(t_sequence, v.is_undefined() || v.is_string() || v.is_list() || v.is_dict())
SIMPLE_TEST(t_lower, [&] { std::string s = v.to_str(); return str_lower(s) == s && str_upper(s) != s; }())
SIMPLE_TEST(t_upper, [&] { std::string s = v.to_str(); return str_upper(s) == s && str_lower(s) != s; }())
#undef SIMPLE_TEST

bool t_divisibleby(Evaluator& ev, const Value& v, CallArgs& a) {
  a.check(1, {"num"});
  Value r = binary_op(ev, BinOp::Mod, v, a.get(0, "num"));
  return r.is_number() && r.as_double() == 0;
}
bool t_even(Evaluator& ev, const Value& v, CallArgs& a) {
  a.check(0, {});
  Value r = binary_op(ev, BinOp::Mod, v, Value(2));
  return r.as_double() == 0;
}
bool t_odd(Evaluator& ev, const Value& v, CallArgs& a) {
  a.check(0, {});
  Value r = binary_op(ev, BinOp::Mod, v, Value(2));
  return r.as_double() == 1;
}
bool t_in(Evaluator&, const Value& v, CallArgs& a) {
  a.check(1, {"seq"});
  return py_contains(a.get(0, "seq"), v);
}
bool t_sameas(Evaluator&, const Value& v, CallArgs& a) {
  a.check(1, {"other"});
  Value o = a.get(0, "other");
  if (v.type() != o.type()) return false;
  switch (v.type()) {
    case Value::Type::None:
    case Value::Type::Undefined: return true;
    case Value::Type::Bool:
    case Value::Type::Int: return v.as_int() == o.as_int() && v.as_int() >= -5 && v.as_int() <= 256;  // small-int cache
    case Value::Type::Float: return false;
    default: return v.same_object(o);
  }
}
bool t_filter(Evaluator&, const Value& v, CallArgs& a) {
  a.check(0, {});
  return v.is_string() && find_filter(v.str()) != nullptr;
}
bool t_test(Evaluator&, const Value& v, CallArgs& a) {
  a.check(0, {});
  return v.is_string() && find_test(v.str()) != nullptr;
}

struct TestEntry {
  const char* name;
  TestFn fn;
};
const TestEntry kTests[] = {
    {"!=", t_ne},          {"<", t_lt},              {"<=", t_le},          {"==", t_eq},
    {">", t_gt},           {">=", t_ge},             {"boolean", t_boolean}, {"callable", t_callable},
    {"defined", t_defined}, {"divisibleby", t_divisibleby}, {"eq", t_eq},   {"equalto", t_eq},
    {"escaped", t_escaped}, {"even", t_even},        {"false", t_false},    {"filter", t_filter},
    {"float", t_float},    {"ge", t_ge},             {"greaterthan", t_gt}, {"gt", t_gt},
    {"in", t_in},          {"integer", t_integer},   {"iterable", t_iterable}, {"le", t_le},
    {"lessthan", t_lt},    {"lower", t_lower},       {"lt", t_lt},          {"mapping", t_mapping},
    {"ne", t_ne},          {"none", t_none},         {"number", t_number},  {"odd", t_odd},
    {"sameas", t_sameas},  {"sequence", t_sequence}, {"string", t_string},  {"test", t_test},
    {"true", t_true},      {"undefined", t_undefined}, {"upper", t_upper},
};

}  // namespace

TestFn find_test(std::string_view name) {
  for (const auto& t : kTests)
    if (name == t.name) return t.fn;
  return nullptr;
}

}  // namespace kvad::jinja::detail
