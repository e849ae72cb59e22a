#include "serve/tool_request.h"

#include "grammar/grammar.h"
#include "serve/request_fields.h"
#include "serve/structured_output.h"

namespace kvad::serve {

namespace {

// OpenAI's rule for function names; it also keeps a name a plain literal in the call grammar.
bool valid_tool_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s)
    if (!std::isalnum((unsigned char)c) && c != '_' && c != '-') return false;
  return true;
}

std::string function_name(const Json& f, const std::string& at) {
  if (!has(f, "name")) bad(at + "name", fmt::format("'{}name' is required", at));
  std::string name = get_string(f, "name", at);
  if (!valid_tool_name(name))
    bad(at + "name", fmt::format("'{}name' must be 1 to 64 letters, digits, '_' or '-', got '{}'", at, json_snippet(f["name"], 70)));
  return name;
}

// One entry of `tools`: {"type": "function", "function": {"name", "description", "parameters", "strict"}}.
// `ordered` is the same entry in the client's key order (what the template shows).
ToolSpec read_tool(const Json& t, const OrderedJson& ordered, size_t i) {
  const std::string at = fmt::format("tools[{}]", i);
  if (!t.is_object()) bad(at, fmt::format("'{}' must be an object", at));
  if (!has(t, "type") || t["type"] != "function")
    bad(at + ".type", fmt::format("'{}.type' must be \"function\" (the only kind of tool)", at));
  if (!has(t, "function") || !t["function"].is_object()) bad(at + ".function", fmt::format("'{}.function' must be an object", at));
  const Json& f = t["function"];
  const std::string fat = at + ".function.";
  ToolSpec spec{function_name(f, fat), OrderedJson::object()};
  if (has(f, "description")) get_string(f, "description", fat);
  if (has(f, "strict")) get_bool(f, "strict", fat);  // forced calls are held to the schema either way
  if (has(f, "parameters")) {
    if (!f["parameters"].is_object())
      bad(fat + "parameters", fmt::format("'{}parameters' must be a JSON Schema object, got {}", fat, json_type_name(f["parameters"])));
    spec.parameters = ordered["function"]["parameters"];
  }
  return spec;
}

// A forced call holds its arguments to the schema, so each offered tool's schema must compile
// (keywords kvad cannot enforce are refused by name). Under auto and none a schema is only shown to
// the model, and real tools use keywords such as `minimum` freely: those are not compiled.
void check_forced_schemas(const GenRequest& r) {
  for (size_t i = 0; i < r.tool_specs.size(); i++) {
    if (r.tool_choice == GenRequest::ToolChoice::Named && r.tool_specs[i].name != r.tool_choice_name) continue;
    const std::string field = fmt::format("tools[{}].function.parameters", i);
    try {
      grammar::compile_json_schema(r.tool_specs[i].parameters);
    } catch (const Error& e) {
      bad(field, fmt::format("'{}' (with tool_choice {}): {}", field,
                             r.tool_choice == GenRequest::ToolChoice::Named ? "naming it" : "required", e.what()));
    }
  }
}

void read_tool_choice(const Json& c, GenRequest& r) {
  using TC = GenRequest::ToolChoice;
  if (c.is_string()) {
    const std::string& s = c.get_ref<const std::string&>();
    if (s == "auto") r.tool_choice = TC::Auto;
    else if (s == "none") r.tool_choice = TC::None;
    else if (s == "required") r.tool_choice = TC::Required;
    else bad("tool_choice", fmt::format("'tool_choice' must be \"auto\", \"none\", \"required\" or a function, got '{}'", json_snippet(c, 40)));
    return;
  }
  if (!c.is_object() || !has(c, "type") || c["type"] != "function" || !has(c, "function") || !c["function"].is_object())
    bad("tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
  r.tool_choice = TC::Named;
  r.tool_choice_name = function_name(c["function"], "tool_choice.function.");
  for (const ToolSpec& t : r.tool_specs)
    if (t.name == r.tool_choice_name) return;
  bad("tool_choice.function.name", fmt::format("'tool_choice.function.name' is '{}', which is not one of the request's tools", r.tool_choice_name));
}

}  // namespace

void parse_openai_tools(const Json& j, const std::string& body, GenRequest& r) {
  if (has(j, "tools")) {
    const Json& ts = j["tools"];
    if (!ts.is_array()) bad("tools", fmt::format("'tools' must be a list, got {}", json_type_name(ts)));
    if (size_t n = ts.dump(-1, ' ', false, Json::error_handler_t::replace).size(); n > kMaxSchemaBytes)
      bad("tools", fmt::format("'tools' is {} bytes of JSON; at most {} are accepted", n, kMaxSchemaBytes));
    if (!ts.empty()) {
      OrderedJson ordered = parse_ordered_json(body, "the request body", JsonLimits{kRequestJsonDepth, body.size()})["tools"];
      for (size_t i = 0; i < ts.size(); i++) {
        r.tool_specs.push_back(read_tool(ts[i], ordered[i], i));
        for (size_t k = 0; k + 1 < r.tool_specs.size(); k++)
          if (r.tool_specs[k].name == r.tool_specs.back().name)
            bad(fmt::format("tools[{}].function.name", i), fmt::format("'tools[{}].function.name': '{}' is already tools[{}]'s name", i, r.tool_specs.back().name, k));
      }
      r.tools = std::move(ordered);
    }
  }
  if (has(j, "parallel_tool_calls")) r.parallel_tool_calls = get_bool(j, "parallel_tool_calls");
  if (has(j, "tool_choice")) {
    read_tool_choice(j["tool_choice"], r);
    bool forced = r.tool_choice == GenRequest::ToolChoice::Required || r.tool_choice == GenRequest::ToolChoice::Named;
    if (forced && r.tool_specs.empty()) bad("tool_choice", "'tool_choice' asks for a call but the request has no 'tools'");
    if (forced && !r.constraint_field.empty())
      bad("tool_choice", fmt::format("'tool_choice' asks for a call and '{}' for another output format: send one of them", r.constraint_field));
    if (forced && r.ignore_eos)
      bad("tool_choice", "'tool_choice' asks for a call, which cannot be combined with 'ignore_eos': the answer ends with the call");
    if (forced) check_forced_schemas(r);
  }
}

void read_message_tool_fields(const Json& m, size_t i, OrderedJson& out) {
  const std::string at = fmt::format("messages[{}].", i);
  if (has(m, "tool_call_id")) out["tool_call_id"] = get_string(m, "tool_call_id", at);
  if (has(m, "name")) out["name"] = get_string(m, "name", at);
  if (!has(m, "tool_calls") || (m["tool_calls"].is_array() && m["tool_calls"].empty())) return;  // [] is no call
  const Json& calls = m["tool_calls"];
  if (out["role"] != "assistant") bad(at + "tool_calls", fmt::format("'{}tool_calls' belongs to assistant messages", at));
  if (!calls.is_array()) bad(at + "tool_calls", fmt::format("'{}tool_calls' must be a list", at));
  out["tool_calls"] = OrderedJson::array();
  for (size_t k = 0; k < calls.size(); k++) {
    const std::string cat = fmt::format("{}tool_calls[{}].", at, k);
    const Json& c = calls[k];
    if (!c.is_object() || !has(c, "function") || !c["function"].is_object())
      bad(cat + "function", fmt::format("'{}function' must be an object", cat));
    const Json& f = c["function"];
    OrderedJson call = OrderedJson::object();
    if (has(c, "id")) call["id"] = get_string(c, "id", cat);
    call["type"] = "function";
    OrderedJson fn = {{"name", function_name(f, cat + "function.")}};
    // OpenAI sends the arguments as JSON text; the templates show them with tojson or |items.
    OrderedJson args = OrderedJson::object();
    if (has(f, "arguments")) {
      const std::string aat = cat + "function.arguments";
      if (f["arguments"].is_object()) {
        args = OrderedJson::parse(f["arguments"].dump());
      } else {
        std::string text = get_string(f, "arguments", cat + "function.");
        try {
          args = parse_ordered_json(text, aat, JsonLimits{kRequestJsonDepth, text.size()});
        } catch (const Error&) {
          bad(aat, fmt::format("'{}' must be a JSON object's text, got '{}'", aat, json_snippet(f["arguments"], 60)));
        }
        if (!args.is_object()) bad(aat, fmt::format("'{}' must be a JSON object's text", aat));
      }
    }
    fn["arguments"] = std::move(args);
    call["function"] = std::move(fn);
    out["tool_calls"].push_back(std::move(call));
  }
}

ToolFamily prepare_tools(const GenRequest& r, const std::string& template_source, GenerateOptions& opts) {
  using TC = GenRequest::ToolChoice;
  if (r.tool_specs.empty() || r.tool_choice == TC::None) return ToolFamily::None;
  ToolFamily f = tool_family(template_source);
  if (r.tool_choice == TC::Auto) return f;
  if (f == ToolFamily::None)
    throw HttpError(400, "'tool_choice' asks for a call, but this model's chat template has no tool-call syntax kvad knows",
                    "invalid_request_error", "tool_choice", "unsupported_value");
  std::vector<ToolSpec> offered;
  for (const ToolSpec& t : r.tool_specs)
    if (r.tool_choice == TC::Required || t.name == r.tool_choice_name) offered.push_back(t);
  try {
    opts.constraint = grammar::compile_gbnf(tool_call_gbnf(f, offered, r.parallel_tool_calls));
  } catch (const Error& e) {
    throw HttpError(400, fmt::format("'tools': {}", e.what()), "invalid_request_error", "tools");
  }
  return f;
}

}  // namespace kvad::serve
