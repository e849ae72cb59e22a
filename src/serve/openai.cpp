#include "serve/openai.h"

#include "serve/lora_adapters.h"
#include "serve/request_fields.h"
#include "serve/structured_output.h"
#include "serve/tool_request.h"

#include "serve/conn_guard.h"

#include <chrono>
#include <cmath>
#include <random>

namespace kvad::serve {

Json error_json(const std::string& message, const std::string& type, const std::string& param,
                const std::string& code) {
  Json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return {{"error", e}};
}


// Bounded depth (parse_json): nothing below ever recurses deeper than kRequestJsonDepth. The
// error names the place ("number overflow parsing '1e999' at 'max_tokens'") and quotes no more
// of the body than a short token.
Json parse_request_body(const std::string& body) {
  Json j = parse_request_json(body);
  if (!j.is_object()) throw HttpError(400, "the request body must be a JSON object", "invalid_request_error", "", "invalid_json");
  return j;
}

Json parse_request_json(const std::string& body) {
  GuardedHttp::request_read();  // the whole body is in: the connection's read deadline is over
  Json j;
  try {
    j = parse_json(body, "the request body", JsonLimits{kRequestJsonDepth, body.size()});
  } catch (const Error& e) {
    std::string m = e.what();
    const std::string prefix = "the request body: invalid JSON: ";
    if (m.rfind(prefix, 0) == 0) m = "the request body is not valid JSON: " + m.substr(prefix.size());
    else if (m.rfind("the request body: ", 0) == 0) m = "the request body " + m.substr(18);
    std::string param;
    if (auto at = m.rfind(" at '"); at != std::string::npos && m.back() == '\'') param = m.substr(at + 5, m.size() - at - 6);
    throw HttpError(400, m, "invalid_request_error", param, "invalid_json");
  }
  return j;
}

namespace {

Json parse_body(const std::string& body) { return parse_request_body(body); }

// Fields both endpoints share.
void parse_common(const Json& j, GenRequest& r) {
  if (has(j, "model")) r.model = get_string(j, "model");
  if (has(j, "stream")) r.stream = get_bool(j, "stream");
  if (has(j, "stream_options")) {
    const Json& so = j["stream_options"];
    if (!so.is_object()) bad("stream_options", "'stream_options' must be an object");
    if (has(so, "include_usage")) {
      if (!so["include_usage"].is_boolean()) bad("stream_options.include_usage", "'stream_options.include_usage' must be a boolean");
      r.include_usage = so["include_usage"].get<bool>();
    }
    if (!r.stream) bad("stream_options", "'stream_options' is only allowed when 'stream' is true");
  }
  // Without a limit a request runs until the context is full, as OpenAI's does.
  for (const char* k : {"max_tokens", "max_completion_tokens"})
    if (has(j, k)) r.max_tokens = get_int(j, k, 1, (int64_t)1 << 30);
  r.sampling = SamplingParams{};
  r.sampling.temperature = 1.0f;  // OpenAI's defaults
  r.sampling.top_p = 1.0f;
  r.sampling.top_k = 0;
  r.sampling.min_p = 0.0f;
  if (has(j, "temperature")) r.sampling.temperature = (float)get_number(j, "temperature", 0, 2);
  if (has(j, "top_p")) {
    double p = get_number(j, "top_p", 0, 1);
    r.sampling.top_p = p > 0 ? (float)p : 1e-9f;  // 0 keeps only the most likely token
  }
  // Extensions most servers accept (vLLM, llama.cpp): not in OpenAI's API but harmless to clients.
  if (has(j, "top_k")) r.sampling.top_k = (int)get_int(j, "top_k", 0, 1 << 24);
  if (has(j, "min_p")) r.sampling.min_p = (float)get_number(j, "min_p", 0, 1);
  if (has(j, "repetition_penalty")) r.sampling.repetition_penalty = (float)get_number(j, "repetition_penalty", 1e-3, 100);
  if (has(j, "presence_penalty")) r.sampling.presence_penalty = (float)get_number(j, "presence_penalty", -2, 2);
  if (has(j, "frequency_penalty")) r.sampling.frequency_penalty = (float)get_number(j, "frequency_penalty", -2, 2);
  if (has(j, "ignore_eos")) r.ignore_eos = get_bool(j, "ignore_eos");
  if (has(j, "lora")) r.lora = parse_lora_list(j["lora"], "lora");  // llama-server's per-request adapters
  if (has(j, "cache_salt")) {
    if (!j["cache_salt"].is_string() || j["cache_salt"].get_ref<const std::string&>().size() > 256)
      bad("cache_salt", "'cache_salt' must be a string of at most 256 bytes");
    r.cache_salt = j["cache_salt"].get<std::string>();
  }  // benchmarks: exactly max_tokens tokens
  if (has(j, "seed")) {
    const Json& v = j["seed"];
    if (!v.is_number_integer()) bad("seed", fmt::format("'seed' must be an integer, got {}", json_type_name(v)));
    r.sampling.seed = v.is_number_unsigned() ? v.get<uint64_t>() : (uint64_t)v.get<int64_t>();
    r.seed_given = true;
  }
  if (has(j, "stop")) {
    const Json& v = j["stop"];
    if (v.is_string()) {
      r.stop.push_back(v.get<std::string>());
    } else if (v.is_array()) {
      if (v.size() > 4) bad("stop", fmt::format("'stop' takes at most 4 sequences, got {}", v.size()));
      for (const Json& s : v) {
        if (!s.is_string()) bad("stop", "'stop' must be a string or a list of strings");
        r.stop.push_back(s.get<std::string>());
      }
    } else {
      bad("stop", fmt::format("'stop' must be a string or a list of strings, got {}", json_type_name(v)));
    }
    for (const std::string& s : r.stop)
      if (s.empty()) bad("stop", "'stop' sequences must not be empty");
  }
  if (has(j, "n")) r.n = get_int(j, "n", 1, 128);  // the server's own cap is checked where it is known
  if (has(j, "logit_bias") && !(j["logit_bias"].is_object() && j["logit_bias"].empty()))
    throw HttpError(400, "'logit_bias' is not supported by this server", "invalid_request_error", "logit_bias",
                    "unsupported_parameter");
  if (has(j, "user")) r.user = get_string(j, "user");
}

std::string content_text(const Json& c, size_t i) {
  std::string param = fmt::format("messages[{}].content", i);
  if (c.is_null()) return "";
  if (c.is_string()) return c.get<std::string>();
  if (c.is_array()) {  // [{"type": "text", "text": "..."}]
    std::string out;
    for (const Json& part : c) {
      if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
        bad(param, fmt::format("'{}' parts must be objects with a 'type'", param));
      if (part["type"] != "text")
        throw HttpError(400, fmt::format("'{}': content of type '{}' is not supported (text only)", param,
                                         part["type"].get<std::string>()),
                        "invalid_request_error", param, "unsupported_value");
      if (!part.contains("text") || !part["text"].is_string()) bad(param, fmt::format("'{}': a text part needs 'text'", param));
      out += part["text"].get<std::string>();
    }
    return out;
  }
  bad(param, fmt::format("'{}' must be a string or a list of text parts", param));
}

}  // namespace

GenRequest parse_chat_request(const std::string& body) {
  Json j = parse_body(body);
  GenRequest r;
  r.chat = true;
  if (!j.contains("messages")) bad("messages", "'messages' is required");
  const Json& ms = j["messages"];
  if (!ms.is_array() || ms.empty()) bad("messages", "'messages' must be a non-empty list");
  r.messages = OrderedJson::array();
  for (size_t i = 0; i < ms.size(); i++) {
    const Json& m = ms[i];
    if (!m.is_object()) bad(fmt::format("messages[{}]", i), fmt::format("'messages[{}]' must be an object", i));
    if (!m.contains("role") || !m["role"].is_string())
      bad(fmt::format("messages[{}].role", i), fmt::format("'messages[{}].role' is required", i));
    std::string role = m["role"];
    if (role == "developer") role = "system";  // OpenAI's newer name for it
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      bad(fmt::format("messages[{}].role", i),
          fmt::format("'messages[{}].role' must be system, user, assistant or tool, got '{}'", i, role));
    if (!m.contains("content") && role != "assistant")
      bad(fmt::format("messages[{}].content", i), fmt::format("'messages[{}].content' is required", i));
    std::string text = m.contains("content") ? content_text(m["content"], i) : "";
    OrderedJson msg = {{"role", role}, {"content", text}};  // a null content (a call's) is "": Qwen3's template needs a string
    read_message_tool_fields(m, i, msg);
    r.messages.push_back(std::move(msg));
  }
  parse_common(j, r);
  if (has(j, "logprobs")) r.logprobs = get_bool(j, "logprobs");
  if (has(j, "top_logprobs")) {
    r.top_logprobs = (int)get_int(j, "top_logprobs", 0, 20);
    if (!r.logprobs) bad("top_logprobs", "'top_logprobs' needs 'logprobs' set to true");
  }
  parse_openai_structured(j, body, r);
  parse_openai_tools(j, body, r);
  return r;
}

GenRequest parse_completion_request(const std::string& body) {
  Json j = parse_body(body);
  GenRequest r;
  r.chat = false;
  if (!j.contains("prompt") || j["prompt"].is_null()) bad("prompt", "'prompt' is required");
  // A pointer, not a copy: the value is the client's.
  const Json* pp = &j["prompt"];
  if (pp->is_array() && pp->size() == 1 && ((*pp)[0].is_string() || (*pp)[0].is_array())) pp = &(*pp)[0];
  const Json& p = *pp;
  if (p.is_string()) {
    r.prompt = p.get<std::string>();
  } else if (p.is_array() && !p.empty() && p[0].is_number()) {
    for (const Json& t : p) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
        bad("prompt", "'prompt' token ids must be non-negative integers");
      r.prompt_ids.push_back((int32_t)t.get<int64_t>());
    }
    r.prompt_is_ids = true;
  } else if (p.is_array() && p.size() > 1) {
    throw HttpError(400, "'prompt' must be one prompt: several prompts per request are not supported (no batching yet)",
                    "invalid_request_error", "prompt", "unsupported_value");
  } else {
    bad("prompt", "'prompt' must be a string or a list of token ids");
  }
  parse_common(j, r);
  if (has(j, "logprobs")) {
    r.top_logprobs = (int)get_int(j, "logprobs", 0, 5);
    r.logprobs = true;
  }
  if (has(j, "echo") && get_bool(j, "echo"))
    throw HttpError(400, "'echo' is not supported by this server", "invalid_request_error", "echo", "unsupported_value");
  if (has(j, "best_of") && get_int(j, "best_of", 1, 128) != 1)
    throw HttpError(400, "'best_of' must be 1", "invalid_request_error", "best_of", "unsupported_value");
  if (has(j, "suffix"))
    throw HttpError(400, "'suffix' is not supported by this server", "invalid_request_error", "suffix", "unsupported_parameter");
  parse_openai_structured(j, body, r);
  return r;
}

std::string new_completion_id(bool chat) {
  static thread_local std::mt19937_64 rng{std::random_device{}() ^
                                          (uint64_t)std::chrono::steady_clock::now().time_since_epoch().count()};
  return fmt::format("{}-{:016x}{:08x}", chat ? "chatcmpl" : "cmpl", rng(), (uint32_t)rng());
}

std::string wire_finish_reason(const std::string& r) { return r == "length" ? "length" : "stop"; }

Json usage_json(const Usage& u) {
  Json j = {{"prompt_tokens", u.prompt_tokens},
            {"completion_tokens", u.completion_tokens},
            {"total_tokens", u.prompt_tokens + u.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
  // Speculative drafts in OpenAI's fields for predicted tokens: kept ones are part of the answer;
  // rejected ones were computed and thrown away (not counted in completion_tokens).
  if (u.draft_tokens > 0)
    j["completion_tokens_details"] = {{"accepted_prediction_tokens", u.draft_accepted},
                                      {"rejected_prediction_tokens", u.draft_tokens - u.draft_accepted}};
  return j;
}

static Json bytes_of(const std::string& s) {
  Json b = Json::array();
  for (unsigned char c : s) b.push_back((int)c);
  return b;
}

// JSON text must be valid UTF-8: a piece that is part of a character is shown with U+FFFD (its
// exact bytes are in "bytes").
static std::string printable(const std::string& s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = (unsigned char)s[i];
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; k++) ok = ((unsigned char)s[i + k] >> 6) == 2;
    if (ok) {
      out.append(s, i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i++;
    }
  }
  return out;
}

static double finite(float x) { return std::isfinite(x) ? (double)x : -9999.0; }

Json chat_logprobs_json(const std::vector<TokenOut>& toks, bool with_top) {
  Json content = Json::array();
  for (const TokenOut& t : toks) {
    Json top = Json::array();
    if (with_top)
      for (const auto& [piece, lp] : t.top)
        top.push_back({{"token", printable(piece)}, {"logprob", finite(lp)}, {"bytes", bytes_of(piece)}});
    content.push_back({{"token", printable(t.piece)}, {"logprob", finite(t.logprob)}, {"bytes", bytes_of(t.piece)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}, {"refusal", nullptr}};
}

Json completion_logprobs_json(const std::vector<TokenOut>& toks, bool with_top, size_t off) {
  Json tokens = Json::array(), lps = Json::array(), tops = Json::array(), offs = Json::array();
  for (const TokenOut& t : toks) {
    tokens.push_back(printable(t.piece));
    lps.push_back(finite(t.logprob));
    offs.push_back(off);
    off += t.text.size();
    Json m = Json::object();
    if (with_top)
      for (const auto& [piece, lp] : t.top) m[printable(piece)] = finite(lp);
    tops.push_back(with_top ? m : Json(nullptr));
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

Json finish_details_json(int64_t context_length) {
  return {{"type", "context_full"}, {"context_length", context_length}};
}

static void add_finish_details(Json& choice, int64_t context_full) {
  if (context_full > 0) choice["finish_details"] = finish_details_json(context_full);
}

static Json head(const ResponseMeta& m, const char* object) {
  return {{"id", m.id}, {"object", object}, {"created", m.created}, {"model", m.model}, {"system_fingerprint", "kvad"}};
}

Json chat_response(const ResponseMeta& m, const std::vector<ChoiceOut>& choices, bool with_top, const Usage& u) {
  Json r = head(m, "chat.completion");
  r["choices"] = Json::array();
  for (size_t i = 0; i < choices.size(); i++) {
    const ChoiceOut& c = choices[i];
    Json msg = {{"role", "assistant"}, {"content", c.text}, {"refusal", nullptr}};
    if (!c.tool_calls.empty()) {
      if (c.text.empty()) msg["content"] = nullptr;
      for (const ToolCall& t : c.tool_calls) msg["tool_calls"].push_back(tool_call_json(t));
    }
    r["choices"].push_back({{"index", i},
                            {"message", msg},
                            {"logprobs", c.logprobs ? chat_logprobs_json(*c.logprobs, with_top) : Json(nullptr)},
                            {"finish_reason", c.finish}});
    add_finish_details(r["choices"].back(), c.context_full);
  }
  r["usage"] = usage_json(u);
  return r;
}

Json completion_response(const ResponseMeta& m, const std::vector<ChoiceOut>& choices, bool with_top, const Usage& u) {
  Json r = head(m, "text_completion");
  r["choices"] = Json::array();
  for (size_t i = 0; i < choices.size(); i++) {
    const ChoiceOut& c = choices[i];
    r["choices"].push_back({{"index", i},
                            {"text", c.text},
                            {"logprobs", c.logprobs ? completion_logprobs_json(*c.logprobs, with_top, 0) : Json(nullptr)},
                            {"finish_reason", c.finish}});
    add_finish_details(r["choices"].back(), c.context_full);
  }
  r["usage"] = usage_json(u);
  return r;
}

Json chat_chunk(const ResponseMeta& m, int index, const std::optional<std::string>& role,
                const std::optional<std::string>& content, const std::optional<std::string>& finish,
                const std::vector<TokenOut>* lp, bool with_top, bool include_usage_null, int64_t context_full) {
  Json r = head(m, "chat.completion.chunk");
  Json delta = Json::object();
  if (role) delta["role"] = *role;
  if (content) delta["content"] = *content;
  Json choice = {{"index", index},
                 {"delta", delta},
                 {"logprobs", lp ? chat_logprobs_json(*lp, with_top) : Json(nullptr)},
                 {"finish_reason", finish ? Json(*finish) : Json(nullptr)}};
  add_finish_details(choice, context_full);
  r["choices"] = Json::array({choice});
  if (include_usage_null) r["usage"] = nullptr;
  return r;
}

Json tool_call_json(const ToolCall& c) {
  return {{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
}

Json tool_call_chunk(const ResponseMeta& m, int index, int call_index, const ToolCall& call, bool include_usage_null) {
  Json r = chat_chunk(m, index, std::nullopt, std::nullopt, std::nullopt, nullptr, false, include_usage_null);
  Json t = tool_call_json(call);
  t["index"] = call_index;
  r["choices"][0]["delta"]["tool_calls"] = Json::array({t});
  return r;
}

Json completion_chunk(const ResponseMeta& m, int index, const std::string& text, const std::optional<std::string>& finish,
                      const std::vector<TokenOut>* lp, bool with_top, size_t off, bool include_usage_null,
                      int64_t context_full) {
  Json r = head(m, "text_completion");
  Json choice = {{"index", index},
                 {"text", text},
                 {"logprobs", lp ? completion_logprobs_json(*lp, with_top, off) : Json(nullptr)},
                 {"finish_reason", finish ? Json(*finish) : Json(nullptr)}};
  add_finish_details(choice, context_full);
  r["choices"] = Json::array({choice});
  if (include_usage_null) r["usage"] = nullptr;
  return r;
}

Json usage_chunk(const ResponseMeta& m, bool chat, const Usage& u) {
  Json r = head(m, chat ? "chat.completion.chunk" : "text_completion");
  r["choices"] = Json::array();
  r["usage"] = usage_json(u);
  return r;
}

std::string sse(const Json& j) {
  return "data: " + j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n\n";
}

}  // namespace kvad::serve
