// Tokens -> AST, a port of jinja2/parser.py's grammar so operator precedence and the odd corners
// (filters binding tighter than unary minus, `x is divisibleby 3`, adjacent string literals
// concatenating, `a if b` without else) parse as Jinja2 parses them.
#include "tokenizer/jinja_ast.h"

namespace kvad::jinja::detail {

namespace {

constexpr int kMaxDepth = 200;  // nesting of expressions/blocks; deeper input is rejected

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  Body parse_all() {
    Body body = subparse({});
    if (cur().type != Tok::Eof) fail("unexpected end tag");
    return body;
  }

 private:
  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;

  struct DepthGuard {
    Parser* p;
    explicit DepthGuard(Parser* pp) : p(pp) {
      if (++p->depth_ > kMaxDepth) p->fail("template nesting too deep");
    }
    ~DepthGuard() { --p->depth_; }
  };

  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  void next() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  [[noreturn]] void fail(const std::string& msg) const { raise(cur().line, msg); }

  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == Tok::Name && cur().text == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::Eof: return "end of template";
      case Tok::BlockEnd: return "end of statement block";
      case Tok::VarEnd: return "end of print statement";
      case Tok::BlockBegin: return "begin of statement block";
      case Tok::VarBegin: return "begin of print statement";
      case Tok::Data: return "template data";
      default: return t.text;
    }
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(fmt::format("expected token '{}', got '{}'", op, describe(cur())));
  }
  void expect(Tok type, const char* what) {
    if (cur().type != type) fail(fmt::format("expected {}, got '{}'", what, describe(cur())));
    next();
  }
  std::string expect_name() {
    if (cur().type != Tok::Name) fail(fmt::format("expected name, got '{}'", describe(cur())));
    std::string n = cur().text;
    next();
    return n;
  }

  ExprPtr make(ExprKind k, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line;
    return e;
  }
  StmtPtr make_stmt(StmtKind k, int line) {
    auto s = std::make_unique<Stmt>();
    s->kind = k;
    s->line = line;
    return s;
  }

  // ---- statements ----

  // Parses until a block whose first name is one of `ends` (left as the current token).
  Body subparse(std::initializer_list<const char*> ends) {
    DepthGuard g(this);
    Body body;
    while (cur().type != Tok::Eof) {
      const Token& tk = cur();
      if (tk.type == Tok::Data) {
        auto s = make_stmt(StmtKind::Text, tk.line);
        s->text = tk.text;
        body.push_back(std::move(s));
        next();
      } else if (tk.type == Tok::VarBegin) {
        next();
        auto s = make_stmt(StmtKind::Print, cur().line);
        s->expr = parse_tuple(false, true, {}, false);
        expect(Tok::VarEnd, "end of print statement");
        body.push_back(std::move(s));
      } else if (tk.type == Tok::BlockBegin) {
        next();
        for (const char* e : ends)
          if (is_name(e)) return body;
        body.push_back(parse_statement());
        expect(Tok::BlockEnd, "end of statement block");
      } else {
        fail("unexpected '" + describe(tk) + "'");
      }
    }
    if (ends.size() > 0) {
      std::string want;
      for (const char* e : ends) want += (want.empty() ? "'" : " or '") + std::string(e) + "'";
      fail("unexpected end of template, expected " + want);
    }
    return body;
  }

  // The body of a block statement: `%}` then statements until one of `ends`.
  Body parse_statements(std::initializer_list<const char*> ends, bool drop_needle) {
    skip_op(":");
    expect(Tok::BlockEnd, "end of statement block");
    Body b = subparse(ends);
    if (drop_needle) next();
    return b;
  }

  StmtPtr parse_statement() {
    if (cur().type != Tok::Name) fail("tag name expected");
    std::string tag = cur().text;
    int line = cur().line;
    if (tag == "if") return parse_if();
    if (tag == "for") return parse_for();
    if (tag == "set") return parse_set();
    if (tag == "macro") return parse_macro();
    if (tag == "filter") {
      next();
      auto s = make_stmt(StmtKind::FilterBlock, line);
      s->filter = parse_filter(nullptr, true);
      s->body = parse_statements({"endfilter"}, true);
      return s;
    }
    if (tag == "with") return parse_with();
    if (tag == "print") {  // {% print a, b %} prints each expression
      next();
      auto s = make_stmt(StmtKind::Group, line);
      while (cur().type != Tok::BlockEnd) {
        if (!s->body.empty()) expect_op(",");
        auto p = make_stmt(StmtKind::Print, cur().line);
        p->expr = parse_expression(true);
        s->body.push_back(std::move(p));
      }
      return s;
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail(fmt::format("'{}' outside of a loop", tag));
      next();
      return make_stmt(tag == "break" ? StmtKind::Break : StmtKind::Continue, line);
    }
    if (tag == "generation") {  // transformers' AssistantTracker: renders its body unchanged
      next();
      auto s = make_stmt(StmtKind::Scope, line);
      s->body = parse_statements({"endgeneration"}, true);
      return s;
    }
    if (tag == "block" || tag == "extends" || tag == "include" || tag == "import" || tag == "from" ||
        tag == "call" || tag == "autoescape")
      fail(fmt::format("the '{}' tag is not supported", tag));
    fail(fmt::format("Encountered unknown tag '{}'.", tag));
  }

  StmtPtr parse_if() {
    auto s = make_stmt(StmtKind::If, cur().line);
    next();
    s->expr = parse_tuple(false, false, {}, false);
    s->body = parse_statements({"elif", "else", "endif"}, false);
    if (is_name("elif")) {
      // elif becomes an if nested in else, which renders identically.
      auto nested = parse_if();
      s->else_body.push_back(std::move(nested));
      return s;
    }
    if (is_name("else")) {
      next();
      s->else_body = parse_statements({"endif"}, true);
      return s;
    }
    next();  // endif
    return s;
  }

  StmtPtr parse_for() {
    auto s = make_stmt(StmtKind::For, cur().line);
    next();
    s->target = parse_assign_target({"in"});
    if (!skip_name("in")) fail("expected 'in'");
    s->expr = parse_tuple(false, false, {"recursive"}, false);
    if (skip_name("if")) s->cond = parse_expression(true);
    if (is_name("recursive")) fail("recursive for loops are not supported");
    ++loop_depth_;
    s->body = parse_statements({"endfor", "else"}, false);
    --loop_depth_;
    if (is_name("endfor")) {
      next();
    } else {
      next();
      s->else_body = parse_statements({"endfor"}, true);
    }
    return s;
  }

  StmtPtr parse_set() {
    int line = cur().line;
    next();
    ExprPtr target = parse_assign_target({}, true);
    if (skip_op("=")) {
      auto s = make_stmt(StmtKind::Set, line);
      s->target = std::move(target);
      s->expr = parse_tuple(false, true, {}, false);
      return s;
    }
    auto s = make_stmt(StmtKind::SetBlock, line);
    s->target = std::move(target);
    if (is_op("|")) s->filter = parse_filter(nullptr, false);
    s->body = parse_statements({"endset"}, true);
    return s;
  }

  StmtPtr parse_macro() {
    auto s = make_stmt(StmtKind::Macro, cur().line);
    next();
    s->text = expect_name();
    expect_op("(");
    while (!is_op(")")) {
      if (!s->params.empty()) expect_op(",");
      s->params.push_back(expect_name());
      if (skip_op("=")) s->defaults.push_back(parse_expression(true));
      else if (!s->defaults.empty()) fail("non-default argument follows default argument");
    }
    expect_op(")");
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_statements({"endmacro"}, true);
    loop_depth_ = saved;
    return s;
  }

  StmtPtr parse_with() {
    auto s = make_stmt(StmtKind::With, cur().line);
    next();
    while (cur().type != Tok::BlockEnd) {
      if (!s->params.empty()) expect_op(",");
      s->params.push_back(expect_name());
      expect_op("=");
      s->defaults.push_back(parse_expression(true));
    }
    s->body = parse_statements({"endwith"}, true);
    return s;
  }

  // Assignment target: a name, `ns.attr` (set only), or a tuple of names.
  ExprPtr parse_assign_target(std::initializer_list<const char*> extra_end, bool with_namespace = false) {
    int line = cur().line;
    std::vector<ExprPtr> names;
    bool is_tuple = false;
    while (true) {
      if (!names.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      std::string n = expect_name();
      if (with_namespace && is_op(".")) {
        next();
        auto e = make(ExprKind::NSRef, line);
        e->name = n;
        e->attr = expect_name();
        names.push_back(std::move(e));
      } else {
        if (n == "true" || n == "false" || n == "none" || n == "True" || n == "False" || n == "None")
          fail("can't assign to 'const'");
        auto e = make(ExprKind::Name, line);
        e->name = n;
        names.push_back(std::move(e));
      }
      if (is_op(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (names.empty()) fail("expected an assignment target");
      return std::move(names[0]);
    }
    for (auto& n : names)
      if (n->kind == ExprKind::NSRef) fail("can't assign to 'tuple'");
    auto t = make(ExprKind::Tuple, line);
    t->items = std::move(names);
    return t;
  }

  // ---- expressions ----

  bool is_tuple_end(std::initializer_list<const char*> extra) const {
    if (cur().type == Tok::VarEnd || cur().type == Tok::BlockEnd || is_op(")")) return true;
    for (const char* e : extra)
      if (is_name(e)) return true;
    return false;
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, std::initializer_list<const char*> extra,
                      bool explicit_parens) {
    int line = cur().line;
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (is_tuple_end(extra)) break;
      args.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
      if (is_op(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parens) fail(fmt::format("Expected an expression, got '{}'", describe(cur())));
    }
    auto t = make(ExprKind::Tuple, line);
    t->items = std::move(args);
    return t;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard g(this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    int line = cur().line;
    ExprPtr e1 = parse_or();
    while (skip_name("if")) {
      ExprPtr e2 = parse_or();
      ExprPtr e3 = skip_name("else") ? parse_condexpr() : nullptr;
      auto c = make(ExprKind::Cond, line);
      c->a = std::move(e1);
      c->b = std::move(e2);
      c->c = std::move(e3);
      e1 = std::move(c);
      line = cur().line;
    }
    return e1;
  }

  ExprPtr binary(ExprKind k, ExprPtr l, ExprPtr r, int line) {
    auto e = make(k, line);
    e->a = std::move(l);
    e->b = std::move(r);
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr l = parse_and();
    while (is_name("or")) {
      int line = cur().line;
      next();
      l = binary(ExprKind::Or, std::move(l), parse_and(), line);
    }
    return l;
  }
  ExprPtr parse_and() {
    ExprPtr l = parse_not();
    while (is_name("and")) {
      int line = cur().line;
      next();
      l = binary(ExprKind::And, std::move(l), parse_not(), line);
    }
    return l;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard g(this);
      auto e = make(ExprKind::Not, cur().line);
      next();
      e->a = parse_not();
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    int line = cur().line;
    ExprPtr first = parse_math1();
    auto cmp = make(ExprKind::Compare, line);
    while (true) {
      CmpOp op;
      if (is_op("==")) op = CmpOp::Eq;
      else if (is_op("!=")) op = CmpOp::Ne;
      else if (is_op("<")) op = CmpOp::Lt;
      else if (is_op("<=")) op = CmpOp::Le;
      else if (is_op(">")) op = CmpOp::Gt;
      else if (is_op(">=")) op = CmpOp::Ge;
      else if (is_name("in")) op = CmpOp::In;
      else if (is_name("not") && peek().type == Tok::Name && peek().text == "in") {
        next();
        op = CmpOp::NotIn;
      } else break;
      next();
      cmp->cmp_ops.push_back(op);
      cmp->items.push_back(parse_math1());
    }
    if (cmp->cmp_ops.empty()) return first;
    cmp->a = std::move(first);
    return cmp;
  }

  ExprPtr arith(BinOp op, ExprPtr l, ExprPtr r, int line) {
    auto e = binary(ExprKind::Binary, std::move(l), std::move(r), line);
    e->op = op;
    return e;
  }

  ExprPtr parse_math1() {
    ExprPtr l = parse_concat();
    while (is_op("+") || is_op("-")) {
      BinOp op = is_op("+") ? BinOp::Add : BinOp::Sub;
      int line = cur().line;
      next();
      l = arith(op, std::move(l), parse_concat(), line);
    }
    return l;
  }
  ExprPtr parse_concat() {
    int line = cur().line;
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto c = make(ExprKind::Concat, line);
    c->items.push_back(std::move(first));
    while (skip_op("~")) c->items.push_back(parse_math2());
    return c;
  }
  ExprPtr parse_math2() {
    ExprPtr l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      BinOp op = is_op("*") ? BinOp::Mul : is_op("/") ? BinOp::Div : is_op("//") ? BinOp::FloorDiv : BinOp::Mod;
      int line = cur().line;
      next();
      l = arith(op, std::move(l), parse_pow(), line);
    }
    return l;
  }
  ExprPtr parse_pow() {
    ExprPtr l = parse_unary(true);
    while (is_op("**")) {  // left-associative in Jinja: 2**3**2 == 64
      int line = cur().line;
      next();
      l = arith(BinOp::Pow, std::move(l), parse_unary(true), line);
    }
    return l;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard g(this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      node = make(is_op("-") ? ExprKind::Neg : ExprKind::Pos, cur().line);
      next();
      node->a = parse_unary(false);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& tk = cur();
    int line = tk.line;
    if (tk.type == Tok::Name) {
      auto e = make(ExprKind::Const, line);
      if (tk.text == "true" || tk.text == "True") e->value = Value(true);
      else if (tk.text == "false" || tk.text == "False") e->value = Value(false);
      else if (tk.text == "none" || tk.text == "None") e->value = Value::none();
      else {
        e->kind = ExprKind::Name;
        e->name = tk.text;
      }
      next();
      return e;
    }
    if (tk.type == Tok::String) {
      std::string s;
      while (cur().type == Tok::String) {  // "a" "b" == "ab", as in Python
        s += cur().text;
        next();
      }
      auto e = make(ExprKind::Const, line);
      e->value = Value(std::move(s));
      return e;
    }
    if (tk.type == Tok::Int || tk.type == Tok::Float) {
      auto e = make(ExprKind::Const, line);
      e->value = tk.type == Tok::Int ? Value(tk.ival) : Value(tk.fval);
      next();
      return e;
    }
    if (is_op("(")) {
      next();
      ExprPtr e = parse_tuple(false, true, {}, true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      next();
      auto e = make(ExprKind::List, line);
      while (!is_op("]")) {
        if (!e->items.empty()) expect_op(",");
        if (is_op("]")) break;
        e->items.push_back(parse_expression(true));
      }
      expect_op("]");
      return e;
    }
    if (is_op("{")) {
      next();
      auto e = make(ExprKind::Dict, line);
      while (!is_op("}")) {
        if (!e->items.empty()) expect_op(",");
        if (is_op("}")) break;
        e->items.push_back(parse_expression(true));
        expect_op(":");
        e->items.push_back(parse_expression(true));
      }
      expect_op("}");
      return e;
    }
    fail(fmt::format("unexpected '{}'", describe(tk)));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("[")) node = parse_subscript(std::move(node));
      else if (is_op("(")) node = parse_call(std::move(node));
      else break;
    }
    return node;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) node = parse_filter(std::move(node), false);
      else if (is_name("is")) node = parse_test(std::move(node));
      else if (is_op("(")) node = parse_call(std::move(node));
      else break;
    }
    return node;
  }

  ExprPtr parse_subscript(ExprPtr node) {
    DepthGuard g(this);
    int line = cur().line;
    if (skip_op(".")) {
      if (cur().type == Tok::Name) {
        auto e = make(ExprKind::Getattr, line);
        e->a = std::move(node);
        e->name = cur().text;
        next();
        return e;
      }
      if (cur().type != Tok::Int) fail("expected name or number");
      auto e = make(ExprKind::Getitem, line);
      e->a = std::move(node);
      e->b = make(ExprKind::Const, line);
      e->b->value = Value(cur().ival);
      next();
      return e;
    }
    expect_op("[");
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    auto e = make(ExprKind::Getitem, line);
    e->a = std::move(node);
    if (args.size() == 1) {
      e->b = std::move(args[0]);
    } else {
      e->b = make(ExprKind::Tuple, line);
      e->b->items = std::move(args);
    }
    return e;
  }

  ExprPtr parse_subscribed() {
    int line = cur().line;
    std::vector<ExprPtr> parts;
    if (is_op(":")) {
      next();
      parts.push_back(nullptr);
    } else {
      ExprPtr e = parse_expression(true);
      if (!is_op(":")) return e;
      next();
      parts.push_back(std::move(e));
    }
    if (is_op(":")) parts.push_back(nullptr);
    else if (!is_op("]") && !is_op(",")) parts.push_back(parse_expression(true));
    else parts.push_back(nullptr);
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(",")) parts.push_back(parse_expression(true));
      else parts.push_back(nullptr);
    } else {
      parts.push_back(nullptr);
    }
    auto s = make(ExprKind::Slice, line);
    s->items = std::move(parts);
    return s;
  }

  void parse_call_args(Expr* e) {
    int line = cur().line;
    expect_op("(");
    bool require_comma = false;
    while (!is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      auto bad = [&] { raise(line, "invalid syntax for function call expression"); };
      if (is_op("*")) {
        if (e->star_args || e->star_kwargs) bad();
        next();
        e->star_args = parse_expression(true);
      } else if (is_op("**")) {
        if (e->star_kwargs) bad();
        next();
        e->star_kwargs = parse_expression(true);
      } else if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
        if (e->star_kwargs) bad();
        std::string key = cur().text;
        next();
        next();
        e->kwargs.emplace_back(key, parse_expression(true));
      } else {
        if (e->star_args || e->star_kwargs || !e->kwargs.empty()) bad();
        e->items.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr node) {
    DepthGuard g(this);
    auto e = make(ExprKind::Call, cur().line);
    e->a = std::move(node);
    parse_call_args(e.get());
    return e;
  }

  // `| name(args)` chains; with start_inline the first filter has no leading pipe
  // ({% filter upper %}). A null base means "the block's rendered body".
  ExprPtr parse_filter(ExprPtr node, bool start_inline) {
    while (is_op("|") || start_inline) {
      DepthGuard g(this);
      if (!start_inline) next();
      start_inline = false;
      int line = cur().line;
      std::string name = expect_name();
      while (skip_op(".")) name += "." + expect_name();
      auto e = make(ExprKind::Filter, line);
      e->name = name;
      e->filter_fn = find_filter(name);
      if (!e->filter_fn) raise(line, fmt::format("No filter named '{}'.", name));
      e->a = std::move(node);
      if (is_op("(")) parse_call_args(e.get());
      node = std::move(e);
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    DepthGuard g(this);
    int line = cur().line;
    next();  // is
    bool negated = skip_name("not");
    std::string name = expect_name();
    while (skip_op(".")) name += "." + expect_name();
    auto e = make(ExprKind::Test, line);
    e->name = name;
    e->test_fn = find_test(name);
    if (!e->test_fn) raise(line, fmt::format("No test named '{}'.", name));
    e->a = std::move(node);
    if (is_op("(")) {
      parse_call_args(e.get());
    } else if ((cur().type == Tok::Name || cur().type == Tok::String || cur().type == Tok::Int ||
                cur().type == Tok::Float || is_op("(") || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("You cannot chain multiple tests with is");
      e->items.push_back(parse_postfix(parse_primary()));
    }
    if (!negated) return e;
    auto n = make(ExprKind::Not, line);
    n->a = std::move(e);
    return n;
  }
};

}  // namespace

Body parse(std::vector<Token> tokens) { return Parser(std::move(tokens)).parse_all(); }

}  // namespace kvad::jinja::detail
