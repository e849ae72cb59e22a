// Compile-time name resolution, ported from jinja2/idtracking.py, for the one place where it
// changes output: a frame's names whose first reference is a store (and that no enclosing frame
// references) begin *undefined* in that frame instead of falling through to outer scopes or the
// template variables. E.g. with x="hello":
//   {% for i in [1] %}{{ x }}{% endfor %}{% set x = 5 %}   renders "" (x is the root's, unset yet)
//   {{ x }}{% set x = 5 %}                                 renders "hello" (loaded first)
// Frames: the template, a for body (and its else), a macro, with, set/filter blocks.
#include <map>
#include <set>

#include "tokenizer/jinja_ast.h"

namespace kvad::jinja::detail {

namespace {

enum class Load : uint8_t { Param, Resolve, Alias, Undefined };

struct Symbols {
  const Symbols* parent = nullptr;
  std::map<std::string, Load> refs;
  std::set<std::string> stores;

  bool find_ref(const std::string& n) const {
    for (const Symbols* s = this; s; s = s->parent)
      if (s->refs.count(n)) return true;
    return false;
  }
  void store(const std::string& n) {
    stores.insert(n);
    if (refs.count(n)) return;
    refs[n] = parent && parent->find_ref(n) ? Load::Alias : Load::Undefined;
  }
  void param(const std::string& n) {
    stores.insert(n);
    refs[n] = Load::Param;
  }
  void load(const std::string& n) {
    if (!find_ref(n)) refs[n] = Load::Resolve;
  }
  void branch_update(const std::vector<Symbols>& branches) {
    std::set<std::string> branch_stores;
    for (const auto& b : branches) branch_stores.insert(b.stores.begin(), b.stores.end());
    for (const auto& n : stores) branch_stores.erase(n);
    for (const auto& b : branches) {
      for (const auto& kv : b.refs) refs[kv.first] = kv.second;
      stores.insert(b.stores.begin(), b.stores.end());
    }
    for (const auto& n : branch_stores) refs[n] = parent && parent->find_ref(n) ? Load::Alias : Load::Resolve;
  }
  std::vector<std::string> missing() const {
    std::vector<std::string> out;
    for (const auto& kv : refs)
      if (kv.second == Load::Undefined) out.push_back(kv.first);
    return out;
  }
};

class Analyzer {
 public:
  // The symbols of a frame whose own statements are `body` (plus parameters).
  Symbols frame(const Body& body, const Symbols* parent, const std::vector<std::string>& params = {},
                const Expr* param_target = nullptr) {
    Symbols sym;
    sym.parent = parent;
    for (const auto& p : params) sym.param(p);
    if (param_target) declare_target(*param_target, sym);
    for (const auto& s : body) visit(*s, sym);
    return sym;
  }

  // Recurses into every nested frame, filling the statements' missing lists.
  void fill(Body& body, const Symbols& sym) {
    for (auto& s : body) fill_stmt(*s, sym);
  }

 private:
  void declare_target(const Expr& t, Symbols& sym) {
    if (t.kind == ExprKind::Name) sym.param(t.name);
    else if (t.kind == ExprKind::Tuple)
      for (const auto& i : t.items) declare_target(*i, sym);
  }

  void visit_expr(const Expr* e, Symbols& sym) {
    if (!e) return;
    if (e->kind == ExprKind::Name || e->kind == ExprKind::NSRef) sym.load(e->name);
    visit_expr(e->a.get(), sym);
    visit_expr(e->b.get(), sym);
    visit_expr(e->c.get(), sym);
    for (const auto& i : e->items) visit_expr(i.get(), sym);
    for (const auto& kv : e->kwargs) visit_expr(kv.second.get(), sym);
    visit_expr(e->star_args.get(), sym);
    visit_expr(e->star_kwargs.get(), sym);
  }

  void visit_store(const Expr& t, Symbols& sym) {
    if (t.kind == ExprKind::Name) sym.store(t.name);
    else if (t.kind == ExprKind::NSRef) sym.load(t.name);
    else
      for (const auto& i : t.items) visit_store(*i, sym);
  }

  // FrameSymbolVisitor: a frame's own statements; nested frames are not entered.
  void visit(const Stmt& s, Symbols& sym) {
    switch (s.kind) {
      case StmtKind::Print: visit_expr(s.expr.get(), sym); break;
      case StmtKind::Group:
        for (const auto& c : s.body) visit(*c, sym);
        break;
      case StmtKind::If: {
        visit_expr(s.expr.get(), sym);
        std::vector<Symbols> branches;
        for (const Body* b : {&s.body, &s.else_body}) {
          Symbols copy = sym;
          for (const auto& c : *b) visit(*c, copy);
          branches.push_back(std::move(copy));
        }
        sym.branch_update(branches);
        break;
      }
      case StmtKind::For: visit_expr(s.expr.get(), sym); break;
      case StmtKind::Set:
        visit_expr(s.expr.get(), sym);
        visit_store(*s.target, sym);
        break;
      case StmtKind::SetBlock: visit_store(*s.target, sym); break;
      case StmtKind::Macro: sym.store(s.text); break;
      case StmtKind::FilterBlock: visit_expr(s.filter.get(), sym); break;
      case StmtKind::With:
        for (const auto& d : s.defaults) visit_expr(d.get(), sym);
        break;
      default: break;
    }
  }

  void fill_stmt(Stmt& s, const Symbols& sym) {
    switch (s.kind) {
      case StmtKind::If:
        fill(s.body, sym);
        fill(s.else_body, sym);
        break;
      case StmtKind::Group: fill(s.body, sym); break;
      case StmtKind::For: {
        Symbols body = frame(s.body, &sym, {}, s.target.get());
        s.frame_missing = body.missing();
        fill(s.body, body);
        Symbols els = frame(s.else_body, &sym);
        s.else_missing = els.missing();
        fill(s.else_body, els);
        break;
      }
      case StmtKind::Macro:
      case StmtKind::With: {
        Symbols body = frame(s.body, &sym, s.params);
        s.frame_missing = body.missing();
        fill(s.body, body);
        break;
      }
      case StmtKind::SetBlock:
      case StmtKind::FilterBlock:
      case StmtKind::Scope: {
        Symbols body = frame(s.body, &sym);
        s.frame_missing = body.missing();
        fill(s.body, body);
        break;
      }
      default: break;
    }
  }
};

}  // namespace

std::vector<std::string> analyze_scopes(Body& root) {
  Analyzer a;
  Symbols sym = a.frame(root, nullptr);
  a.fill(root, sym);
  return sym.missing();
}

}  // namespace kvad::jinja::detail
