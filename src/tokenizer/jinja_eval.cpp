// Evaluation: statements write to an output string, expressions produce Values. Scoping follows
// Jinja2: a for-loop body (each iteration) and a macro call get a fresh frame, so `set` inside a
// loop does not leak out (that's what namespace() is for), while `if` shares its frame.
// Every statement and expression is charged against a step budget and every string against the
// output limit, so hostile templates (huge loops, runaway string growth, deep recursion) end with
// an error instead of hanging or exhausting memory.
#include <cmath>

#include "core/error.h"
#include "tokenizer/jinja_ast.h"

namespace kvad::jinja {

using namespace detail;

namespace detail {

Budget*& current_budget() {
  thread_local Budget* b = nullptr;
  return b;
}

void budget_charge(size_t units) {
  Budget* b = current_budget();
  if (!b) return;
  uint64_t cost = 1 + units / 32;
  b->steps += cost;
  if (b->steps > b->max_steps) raise(0, fmt::format("template evaluation exceeded its step budget ({} steps)", b->max_steps));
  if (cost >= b->until_clock) {
    b->until_clock = 1024;
    if (std::chrono::steady_clock::now() > b->deadline) raise(0, "template evaluation exceeded its time limit");
  } else {
    b->until_clock -= uint32_t(cost);
  }
}

void budget_check_size(size_t size) {
  Budget* b = current_budget();
  if (b && size > b->max_output)
    raise(0, fmt::format("string of {} bytes exceeds the output limit of {} bytes", size, b->max_output));
}

}  // namespace detail

namespace {

constexpr int kMaxCallDepth = 100;  // nested macro calls / evaluation recursion

// Frames are shared so a macro can keep the scope it was defined in alive (a macro value may
// escape the loop iteration that defined it).
struct Frame : std::enable_shared_from_this<Frame> {
  std::shared_ptr<Frame> parent;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* find(std::string_view name) const {
    for (const Frame* f = this; f; f = f->parent.get())
      for (auto it = f->vars.rbegin(); it != f->vars.rend(); ++it)
        if (it->first == name) return &it->second;
    return nullptr;
  }
  void set(std::string_view name, Value v) {
    for (auto& kv : vars)
      if (kv.first == name) {
        kv.second = std::move(v);
        return;
      }
    vars.emplace_back(std::string(name), std::move(v));
  }
};

enum class Flow { Normal, Break, Continue };

// Installs a budget for this thread for the life of a render (and restores the previous one).
struct BudgetScope {
  Budget b;
  Budget* saved;
  explicit BudgetScope(const RenderOptions& o) : saved(current_budget()) {
    b.max_steps = o.max_steps;
    b.max_output = o.max_output;
    b.deadline = std::chrono::steady_clock::now() +
                 std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(o.max_seconds));
    b.until_clock = 1024;
    current_budget() = &b;
  }
  ~BudgetScope() { current_budget() = saved; }
};

class Eval final : public Evaluator {
 public:
  explicit Eval(const RenderOptions& opts) : opts_(opts) {}
  // Objects are the only mutable values, so only they can form reference cycles
  // (`set ns.me = ns`); emptying them all at the end of the render frees everything.
  ~Eval() override {
    for (auto& o : objects_) o->attrs.clear();
  }
  void track(const std::shared_ptr<Object>& o) override { objects_.push_back(o); }

  Flow exec_body(const Body& body, Frame& f, std::string& out) {
    for (const auto& s : body) {
      Flow fl = exec(*s, f, out);
      if (fl != Flow::Normal) return fl;
    }
    return Flow::Normal;
  }

  // ---- Evaluator interface ----

  Value getattr(const Value& obj, std::string_view name) override {
    switch (obj.type()) {
      case Value::Type::Undefined: undefined_error(obj);
      case Value::Type::Dict: {
        Value m = bound_method(*this, obj, name);  // Python attributes win over keys for `.`
        if (!m.is_undefined()) return m;
        if (const Value* v = obj.dict().find(name)) return *v;
        return Value::undefined(fmt::format("'dict object' has no attribute '{}'", name));
      }
      case Value::Type::Object:
        if (const Value* v = obj.object().find(name)) return *v;
        return Value::undefined(fmt::format("'{}' object has no attribute '{}'", obj.object().kind, name));
      case Value::Type::String:
      case Value::Type::List: {
        Value m = bound_method(*this, obj, name);
        if (!m.is_undefined()) return m;
        break;
      }
      default: break;
    }
    return Value::undefined(fmt::format("'{}' has no attribute '{}'", describe(obj), name));
  }

  Value getitem(const Value& obj, const Value& key) override {
    switch (obj.type()) {
      case Value::Type::Undefined: undefined_error(obj);
      case Value::Type::Dict: {
        if (key.is_list() || key.is_dict()) raise(0, fmt::format("unhashable type: '{}'", key.type_name()));
        if (const Value* v = obj.dict().find(key)) return *v;
        break;
      }
      case Value::Type::List:
      case Value::Type::String: {
        if (key.is_int() || key.is_bool()) {
          if (obj.is_string()) charge(obj.str().size());  // decoding is linear in the string
          int64_t n = obj.is_string() ? int64_t(cp_count(obj.str())) : int64_t(obj.list().items.size());
          int64_t i = key.as_int();
          if (i < 0) i += n;
          if (i < 0 || i >= n) break;
          if (obj.is_list()) return obj.list().items[size_t(i)];
          return Value(from_u32(to_u32(obj.str()).substr(size_t(i), 1)));
        }
        break;
      }
      default: break;
    }
    if (key.is_string()) return getattr(obj, key.str());  // obj['items'] falls back to attributes
    return Value::undefined(fmt::format("'{}' has no attribute '{}'", describe(obj), key.to_str()));
  }

  Value call(const Value& fn, CallArgs& args) override {
    if (fn.is_undefined()) undefined_error(fn);
    if (!fn.is_function()) raise(0, fmt::format("'{}' object is not callable", fn.type_name()));
    if (++depth_ > kMaxCallDepth) raise(0, "maximum recursion depth exceeded");
    struct Down {
      int* d;
      ~Down() { --*d; }
    } down{&depth_};
    if (args.fn_name.empty()) args.fn_name = fn.function().name;
    return fn.function().fn(args);
  }

  Value apply_filter(std::string_view name, const Value& base, CallArgs& args) override {
    FilterFn f = find_filter(name);
    if (!f) raise(0, fmt::format("No filter named '{}'.", name));
    args.fn_name = name;
    return f(*this, base, args);
  }

  bool apply_test(std::string_view name, const Value& base, CallArgs& args) override {
    TestFn t = find_test(name);
    if (!t) raise(0, fmt::format("No test named '{}'.", name));
    args.fn_name = name;
    return t(*this, base, args);
  }

  void charge(size_t units) override { budget_charge(units); }

  void check_size(size_t size) override { budget_check_size(size); }

  const RenderOptions& options() const override { return opts_; }

 private:
  const RenderOptions& opts_;
  int depth_ = 0;
  std::vector<std::shared_ptr<Object>> objects_;

  [[noreturn]] static void undefined_error(const Value& u) {
    raise(0, u.undefined_hint().empty() ? "Undefined value used" : u.undefined_hint());
  }

  static std::string describe(const Value& v) {
    if (v.is_none()) return "None";
    return v.type_name() + " object";
  }

  void write(std::string& out, std::string_view s) {
    if (out.size() + s.size() > opts_.max_output)
      raise(0, fmt::format("output exceeds the limit of {} bytes", opts_.max_output));
    charge(s.size());
    out += s;
  }

  // Python slice semantics (negative indices and steps) on strings and lists.
  Value slice(const Value& obj, const std::vector<Value>& parts) {
    for (const auto& p : parts)
      if (!p.is_none() && !p.is_int() && !p.is_bool())
        raise(0, "slice indices must be integers or None");
    int64_t step = parts[2].is_none() ? 1 : parts[2].as_int();
    if (step == 0) raise(0, "slice step cannot be zero");
    std::u32string u;
    int64_t n;
    if (obj.is_string()) {
      charge(obj.str().size());
      u = to_u32(obj.str());
      n = int64_t(u.size());
    } else {
      n = int64_t(obj.list().items.size());
    }
    auto clamp = [&](const Value& v, int64_t dflt) -> int64_t {
      if (v.is_none()) return dflt;
      int64_t i = v.as_int();
      if (i < 0) {
        i = i < -n ? (step < 0 ? -1 : 0) : i + n;
      } else if (i >= n) {
        i = step < 0 ? n - 1 : n;
      }
      return i;
    };
    int64_t start = clamp(parts[0], step < 0 ? n - 1 : 0);
    int64_t stop = clamp(parts[1], step < 0 ? -1 : n);
    int64_t span = step > 0 ? std::max<int64_t>(0, stop - start) : std::max<int64_t>(0, start - stop);
    charge(size_t(span / (step > 0 ? step : -step)) * 4);  // before the index list is built
    std::vector<int64_t> idx;
    if (step > 0)
      for (int64_t i = start; i < stop; i += step) idx.push_back(i);
    else
      for (int64_t i = start; i > stop; i += step) idx.push_back(i);
    if (obj.is_string()) {
      std::u32string r;
      for (int64_t i : idx) r += u[size_t(i)];
      return Value(from_u32(r));
    }
    std::vector<Value> r;
    r.reserve(idx.size());
    for (int64_t i : idx) r.push_back(obj.list().items[size_t(i)]);
    return Value::list(std::move(r), obj.list().tuple);
  }

  // A nested frame; `missing` names start undefined there (see analyze_scopes).
  static std::shared_ptr<Frame> child(Frame& f, const std::vector<std::string>& missing = {}) {
    auto c = std::make_shared<Frame>();
    c->parent = f.shared_from_this();
    for (const auto& n : missing) c->vars.emplace_back(n, Value::undefined(fmt::format("'{}' is undefined", n)));
    return c;
  }

  // ---- statements ----

  Flow exec(const Stmt& s, Frame& f, std::string& out) {
    try {
      charge(0);
      return exec_inner(s, f, out);
    } catch (JinjaError& e) {
      if (e.line == 0) e.line = s.line;
      throw;
    }
  }

  Flow exec_inner(const Stmt& s, Frame& f, std::string& out) {
    switch (s.kind) {
      case StmtKind::Text: write(out, s.text); return Flow::Normal;
      case StmtKind::Print: write(out, eval(*s.expr, f).to_str()); return Flow::Normal;
      case StmtKind::If:
        return exec_body(eval(*s.expr, f).truthy() ? s.body : s.else_body, f, out);
      case StmtKind::For: return exec_for(s, f, out);
      case StmtKind::Set: assign(*s.target, eval(*s.expr, f), f); return Flow::Normal;
      case StmtKind::SetBlock: {
        std::string buf;
        exec_body(s.body, *child(f, s.frame_missing), buf);
        Value v(std::move(buf));
        if (s.filter) v = apply_filter_chain(*s.filter, std::move(v), f);
        assign(*s.target, std::move(v), f);
        return Flow::Normal;
      }
      case StmtKind::FilterBlock: {
        std::string buf;
        exec_body(s.body, *child(f, s.frame_missing), buf);
        write(out, apply_filter_chain(*s.filter, Value(std::move(buf)), f).to_str());
        return Flow::Normal;
      }
      case StmtKind::Macro: {
        f.set(s.text, make_macro(s, f));
        return Flow::Normal;
      }
      case StmtKind::With: {
        auto inner = child(f, s.frame_missing);
        for (size_t i = 0; i < s.params.size(); ++i) inner->set(s.params[i], eval(*s.defaults[i], f));
        return exec_body(s.body, *inner, out);
      }
      case StmtKind::Scope: return exec_body(s.body, *child(f, s.frame_missing), out);
      case StmtKind::Group: return exec_body(s.body, f, out);
      case StmtKind::Break: return Flow::Break;
      case StmtKind::Continue: return Flow::Continue;
    }
    return Flow::Normal;
  }

  Flow exec_for(const Stmt& s, Frame& f, std::string& out) {
    Value seq = eval(*s.expr, f);
    std::vector<Value> items = iterate(seq);
    charge(items.size());
    if (s.cond) {  // `for x in xs if cond`: loop.* counts only the kept items
      std::vector<Value> kept;
      for (auto& item : items) {
        auto probe = child(f);
        assign(*s.target, item, *probe);
        if (eval(*s.cond, *probe).truthy()) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      // break/continue in the else block belong to an enclosing loop.
      return exec_body(s.else_body, *child(f, s.else_missing), out);
    }
    int64_t n = int64_t(items.size());
    auto loop = std::make_shared<Object>();
    loop->kind = "LoopContext";  // not tracked: only namespaces are mutable by templates
    Value loop_v = Value::object(loop);
    for (int64_t i = 0; i < n; ++i) {
      loop->attrs = {
          {"index", Value(i + 1)},
          {"index0", Value(i)},
          {"revindex", Value(n - i)},
          {"revindex0", Value(n - i - 1)},
          {"first", Value(i == 0)},
          {"last", Value(i == n - 1)},
          {"length", Value(n)},
          {"depth", Value(1)},
          {"depth0", Value(0)},
          {"previtem", i > 0 ? items[size_t(i - 1)] : Value::undefined("there is no previous item")},
          {"nextitem", i + 1 < n ? items[size_t(i + 1)] : Value::undefined("there is no next item")},
      };
      loop->attrs.emplace_back("cycle", Value::function("cycle", [i](CallArgs& a) -> Value {
        if (a.pos.empty()) raise(0, "no items for cycling given");
        return a.pos[size_t(i) % a.pos.size()];
      }));
      auto body = child(f, s.frame_missing);
      body->set("loop", loop_v);
      assign(*s.target, items[size_t(i)], *body);
      Flow fl = exec_body(s.body, *body, out);
      if (fl == Flow::Break) break;
    }
    return Flow::Normal;
  }

  void assign(const Expr& target, Value v, Frame& f) {
    if (target.kind == ExprKind::Name) {
      f.set(target.name, std::move(v));
    } else if (target.kind == ExprKind::NSRef) {
      const Value* ns = f.find(target.name);
      if (!ns) raise(target.line, fmt::format("'{}' is undefined", target.name));
      if (!ns->is_object() || ns->object().kind != "Namespace")
        raise(target.line, "can only set attributes on namespace objects");
      ns->object().set(target.attr, std::move(v));
    } else {  // tuple unpacking
      std::vector<Value> parts = iterate(v);
      if (parts.size() != target.items.size())
        raise(target.line, parts.size() > target.items.size()
                               ? fmt::format("too many values to unpack (expected {})", target.items.size())
                               : fmt::format("not enough values to unpack (expected {}, got {})",
                                             target.items.size(), parts.size()));
      for (size_t i = 0; i < parts.size(); ++i) assign(*target.items[i], std::move(parts[i]), f);
    }
  }

  Value make_macro(const Stmt& s, Frame& defined_in) {
    // Macros look names up at call time from where they were defined (Jinja closes over the
    // defining scope, and top-level names set after the definition are visible).
    // A weak reference: the frame may hold this very macro, and a strong one would be a cycle.
    std::weak_ptr<Frame> weak_scope = defined_in.weak_from_this();
    const Stmt* def = &s;
    return Value::function(s.text, [this, def, weak_scope](CallArgs& a) -> Value {
      std::shared_ptr<Frame> scope = weak_scope.lock();
      if (!scope) raise(0, fmt::format("macro '{}' called outside the scope that defined it", def->text));
      size_t np = def->params.size();
      if (a.pos.size() > np) raise(0, fmt::format("macro '{}' takes not more than {} argument(s)", def->text, np));
      auto local_p = child(*scope, def->frame_missing);
      Frame& local = *local_p;
      size_t first_default = np - def->defaults.size();
      for (size_t i = 0; i < np; ++i) {
        const std::string& p = def->params[i];
        if (i < a.pos.size()) {
          local.set(p, a.pos[i]);
          continue;
        }
        const Value* kv = nullptr;
        for (const auto& k : a.kw)
          if (k.first == p) kv = &k.second;
        if (kv) local.set(p, *kv);
        else if (i >= first_default) local.set(p, eval(*def->defaults[i - first_default], local));
        else local.set(p, Value::undefined(fmt::format("'{}' is undefined", p)));
      }
      for (const auto& k : a.kw) {
        bool known = false;
        for (const auto& p : def->params) known = known || p == k.first;
        if (!known) raise(0, fmt::format("macro '{}' takes no keyword argument '{}'", def->text, k.first));
      }
      std::string buf;
      exec_body(def->body, local, buf);
      return Value(std::move(buf));
    });
  }

  // ---- expressions ----

  Value eval(const Expr& e, Frame& f) {
    if (++depth_ > kMaxCallDepth * 4) {
      --depth_;
      raise(e.line, "maximum recursion depth exceeded");
    }
    struct Down {
      int* d;
      ~Down() { --*d; }
    } down{&depth_};
    try {
      charge(0);
      return eval_inner(e, f);
    } catch (JinjaError& err) {
      if (err.line == 0) err.line = e.line;
      throw;
    }
  }

  void eval_args(const Expr& e, Frame& f, CallArgs& args) {
    for (const auto& a : e.items) args.pos.push_back(eval(*a, f));
    for (const auto& kv : e.kwargs) args.kw.emplace_back(kv.first, eval(*kv.second, f));
    if (e.star_args)
      for (auto& v : iterate(eval(*e.star_args, f))) args.pos.push_back(std::move(v));
    if (e.star_kwargs) {
      Value d = eval(*e.star_kwargs, f);
      if (!d.is_dict()) raise(e.line, "argument after ** must be a mapping");
      for (const auto& kv : d.dict().items) args.kw.emplace_back(kv.first.to_str(), kv.second);
    }
  }

  Value apply_filter_chain(const Expr& filter, Value base, Frame& f) {
    Value in = filter.a ? apply_filter_chain(*filter.a, std::move(base), f) : std::move(base);
    CallArgs args;
    eval_args(filter, f, args);
    args.fn_name = filter.name;
    return filter.filter_fn(*this, in, args);
  }

  Value lookup(const std::string& name, Frame& f) {
    if (const Value* v = f.find(name)) return *v;
    Value g = global_function(*this, name);
    if (!g.is_undefined()) return g;
    return Value::undefined(fmt::format("'{}' is undefined", name));
  }

  Value eval_inner(const Expr& e, Frame& f) {
    switch (e.kind) {
      case ExprKind::Const: return e.value;
      case ExprKind::Name: return lookup(e.name, f);
      case ExprKind::NSRef: return getattr(lookup(e.name, f), e.attr);
      case ExprKind::List:
      case ExprKind::Tuple: {
        std::vector<Value> items;
        items.reserve(e.items.size());
        for (const auto& i : e.items) items.push_back(eval(*i, f));
        return Value::list(std::move(items), e.kind == ExprKind::Tuple);
      }
      case ExprKind::Dict: {
        DictObj d;
        for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
          Value k = eval(*e.items[i], f);
          d.set(std::move(k), eval(*e.items[i + 1], f));
        }
        return Value::dict(std::move(d));
      }
      case ExprKind::Getattr: return getattr(eval(*e.a, f), e.name);
      case ExprKind::Getitem: {
        Value obj = eval(*e.a, f);
        if (e.b->kind == ExprKind::Slice) {
          std::vector<Value> parts;
          for (const auto& p : e.b->items) parts.push_back(p ? eval(*p, f) : Value::none());
          if (obj.is_undefined()) undefined_error(obj);
          // Slices bypass Jinja's getitem (they compile to a plain Python subscript), so slicing
          // anything but a str or list is a TypeError, not an undefined.
          if (!obj.is_string() && !obj.is_list())
            raise(e.line, obj.is_dict() ? std::string("unhashable type: 'slice'")
                                        : fmt::format("'{}' object is not subscriptable", obj.type_name()));
          return slice(obj, parts);
        }
        return getitem(obj, eval(*e.b, f));
      }
      case ExprKind::Slice: raise(e.line, "slice outside of a subscript");
      case ExprKind::Call: {
        Value fn = eval(*e.a, f);
        CallArgs args;
        eval_args(e, f, args);
        return call(fn, args);
      }
      case ExprKind::Filter: {
        Value base = eval(*e.a, f);
        CallArgs args;
        eval_args(e, f, args);
        args.fn_name = e.name;
        return e.filter_fn(*this, base, args);
      }
      case ExprKind::Test: {
        Value base = eval(*e.a, f);
        CallArgs args;
        eval_args(e, f, args);
        args.fn_name = e.name;
        return Value(e.test_fn(*this, base, args));
      }
      case ExprKind::Neg:
      case ExprKind::Pos: {
        Value v = eval(*e.a, f);
        if (v.is_undefined()) undefined_error(v);
        if (!v.is_number()) raise(e.line, fmt::format("bad operand type for unary {}: '{}'",
                                                      e.kind == ExprKind::Neg ? '-' : '+', v.type_name()));
        if (e.kind == ExprKind::Pos) return v.is_bool() ? Value(v.as_int()) : v;
        if (v.is_float()) return Value(-v.as_double());
        if (v.as_int() == INT64_MIN) raise(e.line, "integer overflow");
        return Value(-v.as_int());
      }
      case ExprKind::Not: return Value(!eval(*e.a, f).truthy());
      case ExprKind::And: {
        Value l = eval(*e.a, f);
        return l.truthy() ? eval(*e.b, f) : l;
      }
      case ExprKind::Or: {
        Value l = eval(*e.a, f);
        return l.truthy() ? l : eval(*e.b, f);
      }
      case ExprKind::Binary: {
        Value l = eval(*e.a, f);
        Value r = eval(*e.b, f);
        return binary_op(*this, e.op, l, r);
      }
      case ExprKind::Compare: {
        Value l = eval(*e.a, f);
        for (size_t i = 0; i < e.cmp_ops.size(); ++i) {  // a < b < c chains like Python
          Value r = eval(*e.items[i], f);
          if (!compare(e.cmp_ops[i], l, r)) return Value(false);
          l = std::move(r);
        }
        return Value(true);
      }
      case ExprKind::Concat: {
        std::string s;
        for (const auto& p : e.items) {
          s += eval(*p, f).to_str();
          check_size(s.size());
        }
        charge(s.size());
        return Value(std::move(s));
      }
      case ExprKind::Cond:
        if (eval(*e.b, f).truthy()) return eval(*e.a, f);
        return e.c ? eval(*e.c, f) : Value::undefined("the inline if-expression evaluated to false and no else section was defined.");
    }
    raise(e.line, "bad expression");
  }

  bool compare(CmpOp op, const Value& l, const Value& r) {
    switch (op) {
      case CmpOp::Eq: return py_equals(l, r);
      case CmpOp::Ne: return !py_equals(l, r);
      case CmpOp::In: return py_contains(r, l);
      case CmpOp::NotIn: return !py_contains(r, l);
      default: break;
    }
    if (l.is_undefined()) undefined_error(l);
    if (r.is_undefined()) undefined_error(r);
    if ((l.is_number() && (l.is_float() || r.is_float())) && r.is_number()) {
      double x = l.as_double(), y = r.as_double();
      if (std::isnan(x) || std::isnan(y)) return false;
    }
    int c = py_compare(l, r);
    switch (op) {
      case CmpOp::Lt: return c < 0;
      case CmpOp::Le: return c <= 0;
      case CmpOp::Gt: return c > 0;
      default: return c >= 0;
    }
  }
};

}  // namespace

struct Template::Impl {
  std::string name;
  Body body;
  std::vector<std::string> root_missing;
};

static std::string located(const std::string& name, const JinjaError& e) {
  return e.line > 0 ? fmt::format("{}:{}: {}", name, e.line, e.msg) : fmt::format("{}: {}", name, e.msg);
}

Template::Template(std::string_view source, std::string name) : impl_(std::make_unique<Impl>()) {
  impl_->name = std::move(name);
  try {
    impl_->body = parse(tokenize(sanitize_utf8(source)));
    impl_->root_missing = analyze_scopes(impl_->body);
  } catch (const JinjaError& e) {
    throw Error(located(impl_->name, e));
  }
}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;
const std::string& Template::name() const { return impl_->name; }

std::string Template::render(const std::vector<std::pair<std::string, Value>>& vars,
                             const RenderOptions& opts) const {
  auto globals = std::make_shared<Frame>();
  for (const auto& kv : vars) globals->set(kv.first, kv.second);
  auto root = std::make_shared<Frame>();
  root->parent = globals;
  for (const auto& n : impl_->root_missing) root->vars.emplace_back(n, Value::undefined(fmt::format("'{}' is undefined", n)));
  BudgetScope budget(opts);
  Eval ev(opts);
  std::string out;
  try {
    ev.exec_body(impl_->body, *root, out);
  } catch (const JinjaError& e) {
    throw Error(located(impl_->name, e));
  }
  return out;
}

}  // namespace kvad::jinja
