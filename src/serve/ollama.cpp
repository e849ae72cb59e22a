#include "serve/ollama.h"

#include <chrono>
#include <cmath>
#include <ctime>

#include "serve/request_fields.h"
#include "serve/structured_output.h"
#include "serve/tool_request.h"

namespace kvad::serve {

namespace {

[[noreturn]] void unsupported(const std::string& field, const std::string& msg) {
  throw HttpError(400, msg, "invalid_request_error", field, "unsupported_parameter");
}

// Ollama's own defaults (its api/types.go DefaultOptions), which its clients expect when they send
// no options: not OpenAI's temperature 1.
SamplingParams ollama_defaults() {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 40;
  p.top_p = 0.9f;
  p.min_p = 0.0f;
  p.repetition_penalty = 1.1f;
  return p;
}

// Options kvad has no use for: hardware and memory settings (kvad sizes those itself) and samplers
// it does not implement. Ollama ignores options it does not know too; these are the documented ones.
bool ignored_option(const std::string& k) {
  static const char* names[] = {"num_keep",  "typical_p", "repeat_last_n", "mirostat",  "mirostat_tau", "mirostat_eta",
                                "tfs_z",     "penalize_newline", "numa",   "num_ctx",   "num_batch",    "num_gpu",
                                "main_gpu",  "low_vram",  "use_mmap",      "use_mlock", "num_thread",   "vocab_only",
                                "f16_kv",    "logits_all"};
  for (const char* n : names)
    if (k == n) return true;
  return false;
}

void parse_options(const Json& j, GenRequest& r) {
  r.sampling = ollama_defaults();
  if (!has(j, "options")) return;
  const Json& o = j["options"];
  if (!o.is_object()) bad("options", fmt::format("'options' must be an object, got {}", json_type_name(o)));
  const std::string at = "options.";
  for (auto it = o.begin(); it != o.end(); ++it) {
    const std::string& k = it.key();
    if (it->is_null() || ignored_option(k)) continue;
    if (k == "temperature") r.sampling.temperature = (float)get_number(o, "temperature", 0, 10, at);
    else if (k == "top_k") r.sampling.top_k = (int)get_int(o, "top_k", 0, 1 << 24, at);
    else if (k == "top_p") r.sampling.top_p = std::max(1e-9f, (float)get_number(o, "top_p", 0, 1, at));
    else if (k == "min_p") r.sampling.min_p = (float)get_number(o, "min_p", 0, 1, at);
    else if (k == "repeat_penalty") r.sampling.repetition_penalty = (float)get_number(o, "repeat_penalty", 1e-3, 100, at);
    else if (k == "presence_penalty") r.sampling.presence_penalty = (float)get_number(o, "presence_penalty", -2, 2, at);
    else if (k == "frequency_penalty") r.sampling.frequency_penalty = (float)get_number(o, "frequency_penalty", -2, 2, at);
    else if (k == "seed") {
      r.sampling.seed = (uint64_t)get_int(o, "seed", INT64_MIN, INT64_MAX, at);
      r.seed_given = true;
    } else if (k == "num_predict") {
      // -1: until the model stops or the context is full; -2: until the context is full.
      int64_t n = get_int(o, "num_predict", -2, (int64_t)1 << 30, at);
      if (n == 0) bad("options.num_predict", "'options.num_predict' must be -1, -2 or a positive number of tokens");
      if (n > 0) r.max_tokens = n;
      if (n == -2) r.ignore_eos = true;
    } else if (k == "stop") {
      const Json& v = *it;
      if (!v.is_array() || v.size() > 16) bad("options.stop", "'options.stop' must be a list of at most 16 strings");
      for (const Json& s : v) {
        if (!s.is_string() || s.get_ref<const std::string&>().empty() || s.get_ref<const std::string&>().size() > 256)
          bad("options.stop", "'options.stop' entries must be strings of 1 to 256 bytes");
        r.stop.push_back(s.get<std::string>());
      }
    }
    // Any other name: ignored, as Ollama does (clients send options of newer Ollama versions).
  }
}

// Fields of both endpoints: model, stream (Ollama streams unless told not to), options, and the
// format (structured output), and the features kvad does not have yet, refused by name rather
// than ignored. `body` is the request's text (a schema is read again from it in key order).
void parse_common(const Json& j, const std::string& body, OllamaRequest& q, bool chat) {
  GenRequest& r = q.gen;
  if (has(j, "model")) r.model = ollama_model_name(get_string(j, "model"));
  r.stream = has(j, "stream") ? get_bool(j, "stream") : true;
  parse_options(j, r);
  if (has(j, "keep_alive") && !j["keep_alive"].is_string() && !j["keep_alive"].is_number())
    bad("keep_alive", "'keep_alive' must be a duration (\"5m\") or a number of seconds");
  if (!chat && has(j, "tools") && !(j["tools"].is_array() && j["tools"].empty()))
    unsupported("tools", "'tools' belongs to /api/chat");
  if (has(j, "think") && j["think"] != false)
    unsupported("think", "'think': this server does not separate thinking from the answer");
  parse_ollama_format(j, body, r);  // last: compiling is the costly check
  if (chat) parse_openai_tools(j, body, r);  // Ollama's tools are OpenAI's; its answers are read in any case (auto)
}

bool non_empty(const Json& j, const char* k) { return has(j, k) && !(j[k].is_array() && j[k].empty()) && j[k] != ""; }

}  // namespace

std::string ollama_model_name(const std::string& asked) {
  const std::string tag = ":latest";
  if (asked.size() > tag.size() && asked.compare(asked.size() - tag.size(), tag.size(), tag) == 0)
    return asked.substr(0, asked.size() - tag.size());
  return asked;
}

OllamaRequest parse_ollama_chat(const std::string& body) {
  Json j = parse_request_body(body);
  OllamaRequest q;
  GenRequest& r = q.gen;
  r.chat = true;
  if (!j.contains("messages") || !j["messages"].is_array()) bad("messages", "'messages' must be a list");
  const Json& ms = j["messages"];
  r.messages = OrderedJson::array();
  for (size_t i = 0; i < ms.size(); i++) {
    const Json& m = ms[i];
    std::string at = fmt::format("messages[{}]", i);
    if (!m.is_object()) bad(at, fmt::format("'{}' must be an object", at));
    if (!m.contains("role") || !m["role"].is_string()) bad(at + ".role", fmt::format("'{}.role' is required", at));
    std::string role = m["role"];
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      bad(at + ".role", fmt::format("'{}.role' must be system, user, assistant or tool, got '{}'", at, role));
    if (non_empty(m, "images")) unsupported(at + ".images", fmt::format("'{}.images': this model reads text only", at));
    std::string text;
    if (has(m, "content")) {
      if (!m["content"].is_string()) bad(at + ".content", fmt::format("'{}.content' must be a string", at));
      text = m["content"].get<std::string>();
    }
    OrderedJson msg = {{"role", role}, {"content", text}};
    if (has(m, "tool_name")) msg["name"] = get_string(m, "tool_name", at + ".");  // Ollama's name of a tool turn's function
    read_message_tool_fields(m, i, msg);
    r.messages.push_back(std::move(msg));
  }
  parse_common(j, body, q, true);
  // No messages: Ollama loads the model and answers done at once.
  q.empty_prompt = r.messages.empty();
  return q;
}

OllamaRequest parse_ollama_generate(const std::string& body) {
  Json j = parse_request_body(body);
  OllamaRequest q;
  GenRequest& r = q.gen;
  std::string prompt = has(j, "prompt") ? get_string(j, "prompt") : "";
  bool raw = has(j, "raw") && get_bool(j, "raw");
  if (non_empty(j, "images")) unsupported("images", "'images': this model reads text only");
  if (non_empty(j, "suffix")) unsupported("suffix", "'suffix' (fill in the middle) is not supported by this server");
  if (non_empty(j, "template"))
    unsupported("template", "'template': this server renders the model's own chat template only");
  if (non_empty(j, "context"))
    unsupported("context", "'context' (the deprecated token context) is not supported: send the conversation to /api/chat");
  std::string system = has(j, "system") ? get_string(j, "system") : "";
  if (raw) {  // the prompt as it is, no template
    r.chat = false;
    r.prompt = prompt;
  } else {  // the prompt as a user message through the model's template, as Ollama does
    r.chat = true;
    r.messages = Json::array();
    if (!system.empty()) r.messages.push_back({{"role", "system"}, {"content", system}});
    r.messages.push_back({{"role", "user"}, {"content", prompt}});
  }
  parse_common(j, body, q, false);
  q.empty_prompt = prompt.empty();
  return q;
}

std::string ollama_timestamp() {
  auto now = std::chrono::system_clock::now();
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  std::time_t secs = (std::time_t)(ns / 1000000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:09d}Z", buf, (long long)(ns % 1000000000));
}

Json ollama_piece(bool chat, const std::string& model, const std::string& text) {
  Json j = {{"model", model}, {"created_at", ollama_timestamp()}};
  if (chat) j["message"] = {{"role", "assistant"}, {"content", text}};
  else j["response"] = text;
  j["done"] = false;
  return j;
}

Json ollama_tool_calls(const std::vector<ToolCall>& calls) {
  Json out = Json::array();
  for (const ToolCall& c : calls)  // arguments as an object, as Ollama sends them
    out.push_back({{"function", {{"name", c.name}, {"arguments", Json::parse(c.arguments)}}}});
  return out;
}

Json ollama_done(bool chat, const std::string& model, const std::string& text, const OllamaFigures& f) {
  Json j = ollama_piece(chat, model, text);
  auto ns = [](double s) { return (int64_t)std::llround(s * 1e9); };
  j["done"] = true;
  j["done_reason"] = f.done_reason;
  j["total_duration"] = ns(f.total_seconds);
  j["load_duration"] = 0;  // the model was loaded before the request
  j["prompt_eval_count"] = f.prompt_tokens;
  j["prompt_eval_duration"] = ns(f.prefill_seconds);
  j["eval_count"] = f.completion_tokens;
  j["eval_duration"] = ns(f.decode_seconds);
  return j;
}

std::string ollama_parameter_size(int64_t n) {
  if (n >= 1000000000) return fmt::format("{:.1f}B", (double)n / 1e9);
  if (n >= 1000000) return fmt::format("{:.1f}M", (double)n / 1e6);
  return fmt::format("{:.1f}K", (double)n / 1e3);
}

}  // namespace kvad::serve
