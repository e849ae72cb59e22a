// Internals of the Jinja engine shared by its .cpp files: tokens, the AST, the evaluator's
// interface used by filters and methods, and Python string helpers. Not for use outside jinja_*.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "tokenizer/jinja.h"

namespace kvad::jinja::detail {

// An error at a template line; Template turns it into kvad::Error "<name>:<line>: <msg>".
// line 0 means "not known yet": the statement or expression being evaluated fills it in.
struct JinjaError {
  int line;
  std::string msg;
};
[[noreturn]] void raise(int line, std::string msg);

// The render's one budget of steps, bytes and time. Template::render installs it for its thread
// so that value-level code without an Evaluator (printing, tojson, comparisons, repr) charges the
// same budget as statements do: shared structure printed or compared many times over, a huge
// indent or separator, ... all end with "template evaluation exceeded its ... budget". Outside a
// render (no budget installed) these calls do nothing.
struct Budget {
  uint64_t steps = 0, max_steps = 0;
  size_t max_output = 0;
  std::chrono::steady_clock::time_point deadline;
  uint32_t until_clock = 0;  // steps charged before the clock is read again
};
Budget*& current_budget();
// units: bytes produced or items visited; costs 1 + units / 32 steps.
void budget_charge(size_t units);
// A string of `size` bytes is about to exist: over the output limit it is an error.
void budget_check_size(size_t size);

// ---- lexer ----
enum class Tok : uint8_t { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };
struct Token {
  Tok type;
  int line;
  std::string text;  // data, name, decoded string, operator
  int64_t ival = 0;
  double fval = 0;
};
// Source -> tokens exactly as Jinja2's lexer with trim_blocks and lstrip_blocks: comments are
// dropped, raw blocks become data, whitespace control is applied to the data tokens.
std::vector<Token> tokenize(std::string_view source);

// ---- AST ----
class Evaluator;
using FilterFn = Value (*)(Evaluator&, const Value& base, CallArgs& args);
using TestFn = bool (*)(Evaluator&, const Value& base, CallArgs& args);
enum class ExprKind : uint8_t {
  Const, Name, NSRef, List, Tuple, Dict, Getattr, Getitem, Slice, Call, Filter, Test,
  Neg, Pos, Not, And, Or, Binary, Compare, Concat, Cond,
};
enum class BinOp : uint8_t { Add, Sub, Mul, Div, FloorDiv, Mod, Pow };
enum class CmpOp : uint8_t { Eq, Ne, Lt, Le, Gt, Ge, In, NotIn };

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;
struct Expr {
  ExprKind kind;
  int line;
  Value value;       // Const
  std::string name;  // Name, NSRef (namespace name), Getattr attribute, Filter/Test name
  std::string attr;  // NSRef attribute
  ExprPtr a, b, c;   // operands: Getattr/Getitem/Filter/Test/Call base in a; Cond: a if b else c
  std::vector<ExprPtr> items;  // List/Tuple/Dict (key, value pairs flattened)/Call+Filter+Test args;
                               // Slice start/stop/step (null when omitted); Concat parts
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr star_args, star_kwargs;  // f(*a, **k)
  BinOp op = BinOp::Add;
  std::vector<CmpOp> cmp_ops;  // Compare: a op0 items[0] op1 items[1] ...
  FilterFn filter_fn = nullptr;  // Filter: resolved at parse time (unknown names fail there)
  TestFn test_fn = nullptr;      // Test: likewise
};

enum class StmtKind : uint8_t {
  Text, Print, If, For, Set, SetBlock, Macro, Break, Continue, FilterBlock, With,
  Scope,  // {% generation %}: its body is a frame of its own
  Group,  // {% print a, b %}: several Print statements, no frame
};
struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;
struct Stmt {
  StmtKind kind;
  int line;
  std::string text;  // Text; Macro name
  ExprPtr expr;      // Print, If test, For iterable, Set value
  ExprPtr target;    // Set/SetBlock/For target (Name, NSRef or Tuple of Names)
  ExprPtr cond;      // For ... if cond
  ExprPtr filter;    // SetBlock/FilterBlock: Filter chain whose innermost base is null
  Body body, else_body;
  std::vector<std::string> params;  // Macro parameters; With targets
  std::vector<ExprPtr> defaults;    // Macro defaults (last params); With values
  // Names that start out undefined in the frame this statement opens (For body, Macro, With,
  // SetBlock, FilterBlock, Scope) and in a For's else frame: see analyze_scopes.
  std::vector<std::string> frame_missing, else_missing;
};

// Tokens -> AST; `loopcontrols` break/continue are allowed inside loops only.
Body parse(std::vector<Token> tokens);

// Jinja2 resolves names per frame at compile time (jinja2/idtracking.py): a name whose first use
// in a frame is an unconditional `set` starts out *undefined* in that frame, hiding any outer or
// context value, so a loop body that reads it before the set runs sees undefined. This fills
// Stmt::frame_missing / else_missing and returns the root frame's list.
std::vector<std::string> analyze_scopes(Body& root);

// ---- evaluation interface for filters, tests and methods ----
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);

// Attribute of a str/dict/list that is a Python method: a bound Function value, or undefined.
// Mutating methods of list/dict are unsafe in the immutable sandbox: calling them is an error.
Value bound_method(Evaluator& ev, const Value& self, std::string_view name);
// The template globals: range, namespace, dict, cycler, joiner, raise_exception, strftime_now.
Value global_function(Evaluator& ev, std::string_view name);

class Evaluator {
 public:
  virtual ~Evaluator() = default;
  // Jinja's environment.getattr (a.b) and getitem (a[b]), sandboxed.
  virtual Value getattr(const Value& obj, std::string_view name) = 0;
  virtual Value getitem(const Value& obj, const Value& key) = 0;
  virtual Value call(const Value& fn, CallArgs& args) = 0;
  virtual Value apply_filter(std::string_view name, const Value& base, CallArgs& args) = 0;
  virtual bool apply_test(std::string_view name, const Value& base, CallArgs& args) = 0;
  // Accounts for work proportional to `units` (bytes produced, items visited); throws past the
  // step budget so no template runs unbounded.
  virtual void charge(size_t units) = 0;
  // Throws when a string of `size` bytes would exceed the output limit.
  virtual void check_size(size_t size) = 0;
  virtual const RenderOptions& options() const = 0;
  // Registers a mutable object so the render can break reference cycles through it at the end.
  virtual void track(const std::shared_ptr<Object>& o) = 0;
};

// ---- Python semantics shared by the evaluator, filters and methods ----
std::vector<Value> iterate(const Value& v);           // for-loop iteration; TypeError if not iterable
int64_t py_len(const Value& v);                       // len(); TypeError if no length
int py_compare(const Value& a, const Value& b);       // <0, 0, >0; TypeError when unorderable
bool py_contains(const Value& container, const Value& item);  // `item in container`
Value binary_op(Evaluator& ev, BinOp op, const Value& a, const Value& b);
Value py_str_format(Evaluator& ev, const std::string& fmt, const Value& args);  // fmt % args
std::string py_str_repr(std::string_view s);  // 'it\'s' -> "it's" quoting rules

// UTF-8 <-> code points (input is valid UTF-8: sources and strings are sanitized on entry).
std::u32string to_u32(std::string_view s);
std::string from_u32(std::u32string_view s);
size_t cp_count(std::string_view s);
bool py_isspace(char32_t c);
std::string py_strip(std::string_view s, const Value& chars, bool left, bool right);
char32_t cp_upper(char32_t c);
char32_t cp_lower(char32_t c);
std::string str_upper(std::string_view s);
std::string str_lower(std::string_view s);

}  // namespace kvad::jinja::detail
