#include "serve/tool_calls.h"

#include <cctype>
#include <random>
#include <set>

#include "core/error.h"
#include "core/text.h"
#include "grammar/json_schema.h"

namespace kvad::serve {

namespace {

constexpr const char* kOpen = "<tool_call>";
constexpr const char* kClose = "</tool_call>";
constexpr const char* kPythonTag = "<|python_tag|>";
// A call is a small object; one the model nests deeper than this is not parsed (bounded recursion).
const JsonLimits kCallLimits{64, 1 << 20};

// {"name": "...", "<args_key>": {...}} -> a call; anything else (prose, a truncated object, other
// keys' types) is not one. Arguments written as a JSON string holding an object are read too.
std::optional<ToolCall> read_call(const std::string& text, const char* args_key) {
  OrderedJson j;
  try {
    j = parse_ordered_json(trim_space(text), "a tool call", kCallLimits);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string() || j["name"].get_ref<const std::string&>().empty())
    return std::nullopt;
  OrderedJson args = j.contains(args_key) ? j[args_key] : OrderedJson::object();
  if (args.is_string()) {
    try {
      args = parse_ordered_json(args.get_ref<const std::string&>(), "tool call arguments", kCallLimits);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  if (!args.is_object()) return std::nullopt;
  return ToolCall{new_tool_call_id(), j["name"].get<std::string>(), args.dump(-1, ' ', false, OrderedJson::error_handler_t::replace)};
}

// Llama 3.1: the whole answer is the call, maybe after <|python_tag|>.
std::optional<ToolCall> read_llama_call(const std::string& text) {
  std::string t = trim_space(text);
  if (t.rfind(kPythonTag, 0) == 0) t = trim_space(t.substr(std::string(kPythonTag).size()));
  if (t.empty() || t[0] != '{') return std::nullopt;
  if (auto c = read_call(t, "parameters")) return c;
  return read_call(t, "arguments");
}

// The length of the longest suffix of `s` that is a proper prefix of `marker`: text that may yet
// become the marker.
size_t partial_suffix(const std::string& s, const std::string& marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; n--)
    if (s.compare(s.size() - n, n, marker, 0, n) == 0) return n;
  return 0;
}

}  // namespace

ToolFamily tool_family(const std::string& src) {
  if (src.find(kOpen) != std::string::npos) return ToolFamily::Hermes;
  // Llama 3.1's template writes past calls as {"name": ..., "parameters": ...} and uses ipython turns.
  if (src.find("\"parameters\": ") != std::string::npos && src.find("ipython") != std::string::npos)
    return ToolFamily::Llama3;
  return ToolFamily::None;
}

std::string new_tool_call_id() {
  static const char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = "call_";
  for (int i = 0; i < 24; i++) id += kAlnum[rng() % 62];
  return id;
}

ParsedAnswer parse_tool_calls(ToolFamily f, const std::string& text) {
  ParsedAnswer out;
  if (f == ToolFamily::Llama3) {
    if (auto c = read_llama_call(text)) out.calls.push_back(std::move(*c));
    else out.content = text;
    return out;
  }
  if (f == ToolFamily::None) {
    out.content = text;
    return out;
  }
  size_t pos = 0;
  while (pos < text.size()) {
    size_t open = text.find(kOpen, pos);
    size_t close = open == std::string::npos ? open : text.find(kClose, open);
    if (close == std::string::npos) {
      out.content += text.substr(pos);
      break;
    }
    out.content += text.substr(pos, open - pos);
    size_t body = open + std::string(kOpen).size(), end = close + std::string(kClose).size();
    if (auto c = read_call(text.substr(body, close - body), "arguments")) out.calls.push_back(std::move(*c));
    else out.content += text.substr(open, end - open);
    pos = end;
  }
  if (!out.calls.empty()) out.content = trim_space(out.content);  // the blank lines around the calls
  return out;
}

void ToolCallStream::content(std::vector<Piece>& out, std::string text) {
  if (!text.empty()) out.push_back(Piece{std::move(text), std::nullopt});
}

std::vector<ToolCallStream::Piece> ToolCallStream::feed(const std::string& text) {
  std::vector<Piece> out;
  held_ += text;
  drain(out, false);
  return out;
}

std::vector<ToolCallStream::Piece> ToolCallStream::finish() {
  std::vector<Piece> out;
  drain(out, true);
  return out;
}

void ToolCallStream::drain(std::vector<Piece>& out, bool end) {
  if (family_ == ToolFamily::None || prose_) {
    content(out, std::move(held_));
    held_.clear();
    return;
  }
  if (family_ == ToolFamily::Llama3) {
    // The call is the whole answer: decided by its first non-blank text, held to the end if it may be one.
    std::string t = trim_space(held_);
    if (t.empty() && !end) return;
    std::string tag = kPythonTag;
    bool maybe = !t.empty() && (t[0] == '{' || t.rfind(tag, 0) == 0 || tag.rfind(t, 0) == 0);
    if (maybe && !end) return;
    if (maybe) {
      if (auto c = read_llama_call(held_)) {
        calls_++;
        out.push_back(Piece{"", std::move(*c)});
        held_.clear();
        return;
      }
    }
    prose_ = true;
    content(out, std::move(held_));
    held_.clear();
    return;
  }
  const std::string open = kOpen, close = kClose;
  while (!held_.empty()) {
    size_t o = held_.find(open);
    if (o == std::string::npos) {
      size_t keep = end ? 0 : partial_suffix(held_, open);
      content(out, held_.substr(0, held_.size() - keep));
      held_.erase(0, held_.size() - keep);
      return;
    }
    content(out, held_.substr(0, o));
    held_.erase(0, o);
    size_t c = held_.find(close);
    if (c == std::string::npos) {
      if (!end) return;
      content(out, std::move(held_));
      held_.clear();
      return;
    }
    size_t stop = c + close.size();
    if (auto call = read_call(held_.substr(open.size(), c - open.size()), "arguments")) {
      calls_++;
      out.push_back(Piece{"", std::move(*call)});
    } else {
      content(out, held_.substr(0, stop));
    }
    held_.erase(0, stop);
  }
}

namespace {

// A string as a GBNF literal body (no quotes): JSON text, its quotes and backslashes escaped.
std::string gbnf_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

bool is_local_rule(const std::string& name) {
  if (name == "root") return true;
  if (name.size() < 2 || name[0] != 's') return false;
  for (size_t i = 1; i < name.size(); i++)
    if (!std::isdigit((unsigned char)name[i])) return false;
  return true;
}

// A rule body with its references to the schema's own rules (root, sN) renamed to prefix + name;
// literals and character classes are copied as they are.
std::string rename_refs(const std::string& body, const std::string& prefix) {
  std::string out;
  for (size_t i = 0; i < body.size();) {
    char ch = body[i];
    if (ch == '"' || ch == '[') {
      char endc = ch == '"' ? '"' : ']';
      size_t j = i + 1;
      while (j < body.size() && body[j] != endc) j += body[j] == '\\' ? 2 : 1;
      out += body.substr(i, j + 1 - i);
      i = j + 1;
      continue;
    }
    if (std::isalpha((unsigned char)ch)) {
      size_t j = i;
      while (j < body.size() && (std::isalnum((unsigned char)body[j]) || body[j] == '-' || body[j] == '_')) j++;
      std::string id = body.substr(i, j - i);
      out += is_local_rule(id) ? prefix + id : id;
      i = j;
      continue;
    }
    out += ch;
    i++;
  }
  return out;
}

// The schema grammars of all tools in one text: each one's root and sN rules prefixed "tI-", the
// shared basics (ws, string, value, the date formats...) written once.
std::string merge_schema_rules(const std::vector<ToolSpec>& tools) {
  std::string out;
  std::set<std::string> shared;
  for (size_t i = 0; i < tools.size(); i++) {
    std::string g;
    try {
      g = grammar::json_schema_to_gbnf(tools[i].parameters);
    } catch (const Error& e) {
      fail("tools[{}].function.parameters: {}", i, e.what());
    }
    const std::string prefix = fmt::format("t{}-", i);
    size_t pos = 0;
    while (pos < g.size()) {
      size_t nl = g.find('\n', pos);
      if (nl == std::string::npos) nl = g.size();
      std::string line = g.substr(pos, nl - pos);
      pos = nl + 1;
      size_t def = line.find(" ::= ");
      if (def == std::string::npos) continue;
      std::string name = line.substr(0, def);
      if (is_local_rule(name)) out += prefix + name + " ::= " + rename_refs(line.substr(def + 5), prefix) + "\n";
      else if (shared.insert(name).second) out += line + "\n";
    }
  }
  return out;
}

}  // namespace

std::string tool_call_gbnf(ToolFamily f, const std::vector<ToolSpec>& tools, bool parallel) {
  if (f == ToolFamily::None || tools.empty()) fail("tool_call_gbnf: no call syntax or no tools");
  const char* args_key = f == ToolFamily::Hermes ? "arguments" : "parameters";
  std::string alts;
  for (size_t i = 0; i < tools.size(); i++) {
    if (i) alts += " | ";
    alts += fmt::format("\"{}\\\", \\\"{}\\\": \" t{}-root", gbnf_escape(tools[i].name), args_key, i);
  }
  std::string call = "\"{\\\"name\\\": \\\"\" (" + alts + ") \"}\"";
  std::string g;
  if (f == ToolFamily::Hermes) {
    g = "root ::= call" + std::string(parallel ? " (\"\\n\" call){0,7}" : "") + "\n";
    g += "call ::= \"<tool_call>\\n\" " + call + " \"\\n</tool_call>\"\n";
  } else {
    g = "root ::= " + call + "\n";  // Llama 3.1 calls one function per answer
  }
  return g + merge_schema_rules(tools);
}

}  // namespace kvad::serve
