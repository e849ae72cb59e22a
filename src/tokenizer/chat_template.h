// Chat templates: the Jinja template from tokenizer_config.json rendered with messages, rendered
// byte for byte as Python's Jinja2 renders it (for the templates of Qwen2.5, Qwen3, Llama 3.x,
// SmolLM2 and the like). The Jinja subset engine itself is in jinja.h.
#pragma once
#include <memory>
#include <string>

#include "core/json.h"

namespace kvad {

class ChatTemplate {
 public:
  // Parses the template; a syntax error throws kvad::Error naming `what` and the line.
  ChatTemplate(const std::string& source, const std::string& what);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;

  // messages: [{"role": "...", "content": "..."}...]. `extra` adds variables (tools, enable_thinking,
  // ...). bos_token/eos_token are passed as the template expects them, and raise_exception,
  // strftime_now are available as in transformers' apply_chat_template.
  // Takes OrderedJson: Python keeps dict insertion order, and `tojson` shows it.
  std::string render(const OrderedJson& messages, bool add_generation_prompt, const std::string& bos_token,
                     const std::string& eos_token, const OrderedJson& extra = OrderedJson::object()) const;
  // The template's text as the model ships it (what Ollama's /api/show and llama-server's /props report).
  const std::string& source() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvad
