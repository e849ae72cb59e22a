// JSON Schema -> GBNF text, then parse_gbnf: one grammar path for both request forms, and the
// generated text is readable when a schema's grammar needs debugging.
#include "grammar/json_schema.h"

#include <algorithm>
#include <map>
#include <set>

#include "core/error.h"
#include "core/utf8.h"

namespace kvad::grammar {

namespace {

constexpr int kMaxSchemaDepth = 64;
constexpr size_t kMaxProperties = 256;   // the property-order grammar grows as n^2
constexpr int64_t kMaxCount = 2000;      // minItems/maxItems/minLength/maxLength (GBNF's repetition limit)

// Shared building blocks. Whitespace is bounded (as llama.cpp's schema grammars do): a model that
// never stops writing spaces would otherwise never finish; numbers keep to 16 digits for the same
// reason.
const char* const kBasics = R"(ws ::= | " " | "\n" [ \t]{0,20}
char ::= [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
string ::= "\"" char* "\""
integer ::= "-"? ("0" | [1-9] [0-9]{0,15})
number ::= integer ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?
boolean ::= "true" | "false"
null ::= "null"
value ::= object | array | string | number | boolean | null
object ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"
array ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
)";

// String formats that have a practical grammar (RFC 3339 date/time, RFC 4122 uuid text).
const std::map<std::string, std::string>& format_bodies() {
  static const std::map<std::string, std::string> m = {
      {"date", R"("\"" fmt-date "\"")"},
      {"time", R"("\"" fmt-time "\"")"},
      {"date-time", R"("\"" fmt-date "T" fmt-time "\"")"},
      {"uuid", R"("\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12} "\"")"},
  };
  return m;
}
// Real calendar dates: days per month, February 29 only in leap years, years 0001-9999.
const char* const kFormatRules = R"(fmt-date ::= fmt-year "-" fmt-month-day | fmt-leap-year "-02-29"
fmt-year ::= [1-9] [0-9]{3} | "0" ([1-9] [0-9]{2} | "0" ([1-9] [0-9] | "0" [1-9]))
fmt-leap-year ::= [0-9] [0-9] ("0" [48] | [2468] [048] | [13579] [26]) | ("0" [48] | [2468] [048] | [13579] [26]) "00"
fmt-month-day ::= ("0" [13578] | "1" [02]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]) | ("0" [469] | "11") "-" ("0" [1-9] | [12] [0-9] | "30") | "02-" ("0" [1-9] | "1" [0-9] | "2" [0-8])
fmt-time ::= ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,9})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9])
)";

// Keywords that only annotate (no effect on what validates) are accepted; everything else that
// is not handled below is refused by name.
const std::set<std::string>& annotation_keywords() {
  static const std::set<std::string> s = {"title", "description", "$schema", "$id", "$comment", "default",
                                          "examples", "deprecated", "readOnly", "writeOnly", "$defs", "definitions"};
  return s;
}
const std::set<std::string>& handled_keywords() {
  static const std::set<std::string> s = {"type", "properties", "required", "additionalProperties", "items",
                                          "minItems", "maxItems", "enum", "const", "anyOf", "oneOf", "$ref",
                                          "minLength", "maxLength", "format"};
  return s;
}

// A JSON value written as a GBNF string literal.
std::string literal(const OrderedJson& v) {
  std::string text = v.dump(), out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

class Converter {
 public:
  explicit Converter(const OrderedJson& root) : root_(root) {}

  std::string run() {
    std::string top = visit(root_, "#", 0);
    std::string out = "root ::= " + top + "\n" + kBasics;
    if (need_formats_) out += kFormatRules;
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    return out;
  }

 private:
  [[noreturn]] static void error(const std::string& where, const std::string& what) {
    fail("json_schema: {}: {}", text_snippet(where, 120), what);  // a path holds property names
  }

  std::string add_rule(const std::string& body) {
    std::string name = fmt::format("s{}", rules_.size());
    rules_.push_back({name, body});
    return name;
  }

  static int64_t count(const OrderedJson& s, const char* key, int64_t dflt, const std::string& where) {
    if (!s.contains(key)) return dflt;
    const OrderedJson& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      error(where, fmt::format("'{}' must be a non-negative integer", key));
    if (v.get<int64_t>() > kMaxCount) error(where, fmt::format("'{}' over {} is not supported", key, kMaxCount));
    return v.get<int64_t>();
  }

  // The rule (or inline expression) for schema `s` found at JSON pointer `where`.
  std::string visit(const OrderedJson& s, const std::string& where, int depth) {
    if (depth > kMaxSchemaDepth) error(where, fmt::format("schemas nest deeper than {}", kMaxSchemaDepth));
    if (s.is_boolean()) {
      if (!s.get<bool>()) error(where, "the schema false allows nothing");
      return "value";
    }
    if (!s.is_object()) error(where, "a schema must be an object or a boolean");
    for (const auto& [k, v] : s.items())
      if (!handled_keywords().count(k) && !annotation_keywords().count(k))
        fail("json_schema: keyword '{}' is not supported (at {})", text_snippet(k), text_snippet(where, 120));
    if (s.contains("$ref")) return visit_ref(s, where, depth);
    if (s.contains("const")) return literal(s["const"]);
    if (s.contains("enum")) return visit_enum(s, where);
    if (s.contains("anyOf") || s.contains("oneOf")) return visit_any_of(s, where, depth);
    if (!s.contains("type")) {
      if (s.contains("properties") || s.contains("additionalProperties")) return visit_object(s, where, depth);
      if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) return visit_array(s, where, depth);
      if (s.contains("minLength") || s.contains("maxLength") || s.contains("format")) return visit_string(s, where);
      return "value";
    }
    const OrderedJson& t = s["type"];
    if (t.is_string()) return visit_type(t.get<std::string>(), s, where, depth);
    if (!t.is_array() || t.empty()) error(where, "'type' must be a string or a non-empty array of strings");
    std::string alts;
    for (size_t i = 0; i < t.size(); i++) {
      if (!t[i].is_string()) error(where, "'type' must be a string or a non-empty array of strings");
      alts += (i ? " | " : "") + visit_type(t[i].get<std::string>(), s, where, depth);
    }
    return "(" + alts + ")";
  }

  std::string visit_type(const std::string& type, const OrderedJson& s, const std::string& where, int depth) {
    if (type == "object") return visit_object(s, where, depth);
    if (type == "array") return visit_array(s, where, depth);
    if (type == "string") return visit_string(s, where);
    if (type == "number" || type == "integer" || type == "boolean" || type == "null") return type;
    error(where, fmt::format("unknown type '{}'", text_snippet(type)));
  }

  std::string visit_ref(const OrderedJson& s, const std::string& where, int depth) {
    if (s.size() > 1 && !std::all_of(s.items().begin(), s.items().end(), [](const auto& kv) {
          return kv.key() == "$ref" || annotation_keywords().count(kv.key());
        }))
      error(where, "keywords beside '$ref' are not supported");
    if (!s["$ref"].is_string()) error(where, "'$ref' must be a string");
    std::string ref = s["$ref"].get<std::string>();
    auto known = refs_.find(ref);
    if (known != refs_.end()) return known->second;
    const OrderedJson* target = resolve(ref, where);
    // Named before its body is visited, so a recursive schema refers to itself.
    std::string name = fmt::format("s{}", rules_.size());
    rules_.push_back({name, ""});
    refs_[ref] = name;
    size_t slot = rules_.size() - 1;
    std::string body = visit(*target, ref, depth + 1);
    rules_[slot].second = body;
    return name;
  }

  const OrderedJson* resolve(const std::string& ref, const std::string& where) const {
    if (ref == "#") return &root_;
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      std::string p = prefix;
      if (ref.compare(0, p.size(), p) != 0) continue;
      std::string key, raw = ref.substr(p.size());
      for (size_t i = 0; i < raw.size(); i++) {  // JSON pointer escapes
        if (raw[i] == '~' && i + 1 < raw.size() && (raw[i + 1] == '0' || raw[i + 1] == '1')) key += raw[++i] == '0' ? '~' : '/';
        else if (raw[i] == '/') error(where, fmt::format("$ref '{}' is not supported (only #/$defs/NAME and #/definitions/NAME)", text_snippet(ref)));
        else key += raw[i];
      }
      std::string section = p.substr(2, p.size() - 3);
      if (!root_.contains(section) || !root_[section].is_object() || !root_[section].contains(key))
        error(where, fmt::format("$ref '{}' points to nothing", text_snippet(ref)));
      return &root_[section][key];
    }
    error(where, fmt::format("$ref '{}' is not supported (only #/$defs/NAME and #/definitions/NAME)", text_snippet(ref)));
  }

  std::string visit_enum(const OrderedJson& s, const std::string& where) {
    const OrderedJson& e = s["enum"];
    if (!e.is_array() || e.empty()) error(where, "'enum' must be a non-empty array");
    std::string alts;
    for (size_t i = 0; i < e.size(); i++) alts += (i ? " | " : "") + literal(e[i]);
    return "(" + alts + ")";
  }

  std::string visit_any_of(const OrderedJson& s, const std::string& where, int depth) {
    const char* key = s.contains("anyOf") ? "anyOf" : "oneOf";
    if (s.contains("anyOf") && s.contains("oneOf")) error(where, "'anyOf' together with 'oneOf' is not supported");
    for (const auto& [k, v] : s.items())
      if (handled_keywords().count(k) && k != key) error(where, fmt::format("'{}' beside '{}' is not supported", k, key));
    const OrderedJson& list = s[key];
    if (!list.is_array() || list.empty()) error(where, fmt::format("'{}' must be a non-empty array", key));
    std::string alts;
    for (size_t i = 0; i < list.size(); i++)
      alts += (i ? " | " : "") + visit(list[i], fmt::format("{}/{}/{}", where, key, i), depth + 1);
    return add_rule(alts);
  }

  std::string visit_string(const OrderedJson& s, const std::string& where) {
    if (s.contains("format")) {
      if (!s["format"].is_string()) error(where, "'format' must be a string");
      std::string f = s["format"].get<std::string>();
      auto it = format_bodies().find(f);
      if (it == format_bodies().end()) fail("json_schema: format '{}' is not supported (at {})", text_snippet(f), text_snippet(where, 120));
      if (s.contains("minLength") || s.contains("maxLength")) error(where, "'minLength'/'maxLength' beside 'format' are not supported");
      need_formats_ = true;
      return add_rule(it->second);
    }
    int64_t lo = count(s, "minLength", 0, where), hi = count(s, "maxLength", -1, where);
    if (lo == 0 && hi < 0) return "string";
    if (hi >= 0 && hi < lo) error(where, "'maxLength' is below 'minLength'");
    std::string rep = hi < 0 ? fmt::format("{{{},}}", lo) : fmt::format("{{{},{}}}", lo, hi);
    return add_rule("\"\\\"\" char" + rep + " \"\\\"\"");
  }

  std::string visit_array(const OrderedJson& s, const std::string& where, int depth) {
    std::string item = "value";
    if (s.contains("items")) {
      if (s["items"].is_array()) error(where, "'items' as an array (tuple form) is not supported");
      item = visit(s["items"], where + "/items", depth + 1);
    }
    int64_t lo = count(s, "minItems", 0, where), hi = count(s, "maxItems", -1, where);
    if (hi >= 0 && hi < lo) error(where, "'maxItems' is below 'minItems'");
    if (hi == 0) return add_rule("\"[\" ws \"]\"");
    std::string more = hi < 0 ? fmt::format("{{{},}}", std::max<int64_t>(lo - 1, 0))
                              : fmt::format("{{{},{}}}", std::max<int64_t>(lo - 1, 0), hi - 1);
    std::string list = item + " ws (\",\" ws " + item + " ws)" + more;
    return add_rule("\"[\" ws " + (lo == 0 ? "(" + list + ")?" : list) + " \"]\"");
  }

  // Declared properties in order, each required one present, optional ones skippable, commas
  // only between: start_i = "nothing written yet, candidates from i"; after_i = "something
  // written". Extra properties (additionalProperties true or a schema) may follow the declared.
  std::string visit_object(const OrderedJson& s, const std::string& where, int depth) {
    std::vector<std::pair<std::string, std::string>> props;  // (key literal, value rule)
    std::vector<std::string> names;
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) error(where, "'properties' must be an object");
      if (s["properties"].size() > kMaxProperties) error(where, fmt::format("more than {} properties", kMaxProperties));
      for (const auto& [k, v] : s["properties"].items()) {
        names.push_back(k);
        props.push_back({literal(OrderedJson(k)), visit(v, where + "/properties/" + k, depth + 1)});
      }
    }
    std::vector<bool> required(props.size(), false);
    if (s.contains("required")) {
      if (!s["required"].is_array()) error(where, "'required' must be an array");
      for (const auto& r : s["required"]) {
        if (!r.is_string()) error(where, "'required' must list strings");
        size_t i = (size_t)(std::find(names.begin(), names.end(), r.get<std::string>()) - names.begin());
        if (i >= props.size()) error(where, fmt::format("required property '{}' is not in 'properties'", text_snippet(r.get<std::string>())));
        required[i] = true;
      }
    }
    std::string extra;  // the rule of one additional "key": value, "" = none allowed
    bool has_props = s.contains("properties");
    const OrderedJson* ap = s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
    if (ap ? !(ap->is_boolean() && !ap->get<bool>()) : !has_props) {
      std::string v = ap && ap->is_object() ? visit(*ap, where + "/additionalProperties", depth + 1) : "value";
      extra = add_rule("string ws \":\" ws " + v + " ws");
    }
    const size_t n = props.size();
    std::vector<std::string> kv(n);
    for (size_t i = 0; i < n; i++) kv[i] = add_rule(props[i].first + " ws \":\" ws " + props[i].second + " ws");
    std::string tail = extra.empty() ? "" : add_rule("(\",\" ws " + extra + ")*");
    // Built from the back: after_i and start_i refer to after_{j+1}.
    std::vector<std::string> after(n + 1), start(n + 1);
    for (size_t i = n + 1; i-- > 0;) {
      std::string a, b;
      bool rest_optional = true;
      for (size_t j = i; j < n && rest_optional; j++) {
        a += (a.empty() ? "" : " | ") + ("\",\" ws " + kv[j] + " " + after[j + 1]);
        b += (b.empty() ? "" : " | ") + (kv[j] + " " + after[j + 1]);
        rest_optional = !required[j];
      }
      if (rest_optional) {
        if (!extra.empty()) {
          a += (a.empty() ? "" : " | ") + ("\",\" ws " + extra + " " + tail);
          b += (b.empty() ? "" : " | ") + (extra + " " + tail);
        }
        a += a.empty() ? "\"\"" : " | \"\"";
        b += b.empty() ? "\"\"" : " | \"\"";
      }
      after[i] = add_rule(a);
      start[i] = add_rule(b);
    }
    return add_rule("\"{\" ws " + start[0] + " \"}\"");
  }

  const OrderedJson& root_;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::map<std::string, std::string> refs_;
  bool need_formats_ = false;
};

}  // namespace

std::string json_schema_to_gbnf(const OrderedJson& schema) { return Converter(schema).run(); }

std::string json_schema_to_gbnf(const Json& schema) {
  return json_schema_to_gbnf(OrderedJson::parse(schema.dump()));
}

std::string json_object_gbnf() { return std::string("root ::= object\n") + kBasics; }

}  // namespace kvad::grammar
