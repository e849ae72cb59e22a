#include "cli/conversation.h"

#include <cstdio>

#include <algorithm>
#include <cstdlib>

#include "cli/generation_io.h"
#include "core/error.h"
#include "core/fs.h"
#include "runtime/engine.h"

namespace kvad::cli {

std::unique_ptr<RunningModel> start_model(const ModelArgs& args, bool completion_ok) {
  auto r = std::make_unique<RunningModel>();
  r->m = load_from_args(args);
  if (!r->m.chat_template && !completion_ok) {
    if (!r->m.chat_template_error.empty()) fail("{}", r->m.chat_template_error);
    fail("{}: the model has no chat template; use kvad run for plain completion", r->m.path);
  }
  r->engine = std::make_unique<Engine>(*r->m.model, engine_options(args, r->m));
  release_host_weights_if_on_device(*r->m.model, *r->engine);
  if (!r->engine->weights_note().empty()) std::fprintf(stderr, "kvad: %s\n", r->engine->weights_note().c_str());
  r->session = r->engine->open_session();
  r->speculative = load_speculative(args.spec, r->m, r->engine->context_length());
  return r;
}

void add_conversation_args(CLI::App* cmd, ConversationArgs& a) {
  cmd->add_option("words", a.words, "[MODEL]: a folder, .gguf, store name or ORG/NAME (or -m)")->expected(0, 1);
  add_model_args(cmd, a.model, /*model_required=*/false);  // default: default_model()
  add_ctx_option(cmd, a.model.ctx);
  add_sampling_args(cmd, a.sampling);
  add_spec_args(cmd, a.model.spec);
  cmd->add_option("--system", a.system, "system message");
}

void finish_conversation_args(ConversationArgs& a, const std::string& command) {
  take_positional_model(a.model, a.words);
  if (!a.words.empty())
    fail("{}: '{}' is not a model (a folder, .gguf, store name or ORG/NAME)", command, a.words[0].substr(0, 60));
  finalize_sampling(a.sampling);
  a.default_model = a.model.model.empty() && !std::getenv("KVAD_DEFAULT_MODEL");
  if (a.model.model.empty()) a.model.model = default_model();
}

Conversation::Conversation(ModelArgs model, SamplingArgs sampling, std::string system, bool completion_ok)
    : args_(std::move(model)), sampling_(std::move(sampling)), system_(std::move(system)), completion_ok_(completion_ok) {
  run_ = start_model(args_, completion_ok_);
  reset();
}

void Conversation::reset() {
  history_ = OrderedJson::array();
  if (!system_.empty()) history_.push_back({{"role", "system"}, {"content", system_}});
}

// With a chat template: the rendered conversation. Without one (a continuation model in the
// TUI): the messages' text run together, which the model continues.
std::vector<int32_t> Conversation::render() const {
  if (run_->m.chat_template) return chat_prompt(run_->m, history_);
  std::string text;
  for (const OrderedJson& msg : history_) text += msg["content"].get<std::string>();
  return run_->m.tokenizer->encode(text, true, true);
}

// The prompt for the conversation. When it and the answer's room (max_tokens, at most half the
// context) do not fit, the oldest turns go until the conversation fills at most half of what is
// left: dropping a batch at once lets the next turns reuse the new prefix instead of each turn
// dropping one more message and prefilling everything again.
std::vector<int32_t> Conversation::fit_context(std::string& notice) {
  int64_t ctx = run_->session->context_length();
  int64_t limit = ctx - std::min<int64_t>(sampling_.max_tokens, ctx / 2);
  std::vector<int32_t> prompt = render();
  if ((int64_t)prompt.size() <= limit) return prompt;
  size_t first = (!history_.empty() && history_[0]["role"] == "system") ? 1 : 0;
  size_t dropped = 0;
  while ((int64_t)prompt.size() > limit / 2 && history_.size() > first + 1) {
    history_.erase(first);  // then on to the next user message: a turn never starts with an answer
    dropped++;
    while (history_.size() > first + 1 && history_[first]["role"] != "user") history_.erase(first), dropped++;
    prompt = render();
  }
  if (dropped)
    notice = fmt::format("(the conversation outgrew the context of {} tokens: dropped the {} oldest messages{})", ctx,
                         dropped, first ? "; the system message is kept" : "");
  if ((int64_t)prompt.size() > limit)
    fail("this message is {} tokens with the system message; with room for the answer ({} tokens) that is more than "
         "the context of {} (/set max_tokens, or -c for a longer context)", prompt.size(), ctx - limit, ctx);
  return prompt;
}

GenerateResult Conversation::say(const std::string& text, const std::function<bool(const std::string&)>& on_text,
                                 std::string& notice) {
  history_.push_back({{"role", "user"}, {"content", text}});
  GenerateResult r;
  try {
    std::vector<int32_t> prompt = fit_context(notice);
    GenerateOptions g = generate_options(run_->m, sampling_);
    g.speculative = run_->speculative;
    g.sampling.seed = sampling_.p.seed + turn_++;
    r = generate(*run_->session, *run_->m.tokenizer, prompt, g, [&](const TokenEvent& ev) { return on_text(ev.text); });
    last_seed_ = g.sampling.seed;
  } catch (...) {
    history_.erase(history_.size() - 1);
    throw;
  }
  history_.push_back({{"role", "assistant"}, {"content", r.text}});
  last_ = r;
  have_last_ = true;
  return r;
}

std::string Conversation::set(const std::string& rest) {
  SamplingParams& p = sampling_.p;
  if (rest.empty())
    return fmt::format("temperature {:g}  top_k {}  top_p {:g}  min_p {:g}  repeat_penalty {:g}  presence_penalty {:g}  "
                       "frequency_penalty {:g}  seed {}  max_tokens {}\nsystem: {}",
                       p.temperature, p.top_k, p.top_p, p.min_p, p.repetition_penalty, p.presence_penalty,
                       p.frequency_penalty, p.seed, sampling_.max_tokens, system_.empty() ? "(none)" : system_);
  std::string key = rest.substr(0, rest.find(' '));
  std::string value = rest.size() > key.size() ? rest.substr(key.size() + 1) : "";
  if (key == "system") {
    system_ = value;
    if (!history_.empty() && history_[0]["role"] == "system") history_.erase(0);
    if (!system_.empty()) history_.insert(history_.begin(), OrderedJson{{"role", "system"}, {"content", system_}});
    return system_.empty() ? "(system message removed)" : "(system message set)";
  }
  SamplingArgs before = sampling_;
  try {
    size_t used = 0;
    double v = std::stod(value, &used);
    if (used != value.size()) throw std::invalid_argument("");
    auto whole = [&] {
      if (v != (double)(int64_t)v) throw std::invalid_argument("");
      return (int64_t)v;
    };
    if (key == "temperature" || key == "temp") p.temperature = (float)v;
    else if (key == "top_k") p.top_k = (int)whole();
    else if (key == "top_p") p.top_p = (float)v;
    else if (key == "min_p") p.min_p = (float)v;
    else if (key == "repeat_penalty" || key == "repetition_penalty") p.repetition_penalty = (float)v;
    else if (key == "presence_penalty") p.presence_penalty = (float)v;
    else if (key == "frequency_penalty") p.frequency_penalty = (float)v;
    else if (key == "seed") p.seed = (uint64_t)whole(), turn_ = 0;
    else if (key == "max_tokens" || key == "num_predict") {
      if (whole() < 1) fail("max_tokens must be at least 1");
      sampling_.max_tokens = whole();
    } else {
      return fmt::format("unknown setting '{}' (/set lists them)", key.substr(0, 40));
    }
    validate(p);
    return fmt::format("({} = {})", key, value);
  } catch (const Error& e) {
    sampling_ = before;
    return fmt::format("error: {}", e.what());
  } catch (const std::exception&) {
    sampling_ = before;
    return fmt::format("error: /set {}: '{}' is not a {}", key, value.substr(0, 40),
                       key == "top_k" || key == "seed" || key == "max_tokens" ? "whole number" : "number");
  }
}

std::string Conversation::save(const std::string& file) const {
  if (file.empty()) return "usage: /save FILE";
  OrderedJson doc = {{"model", run_->m.name}, {"messages", history_}};
  try {
    atomic_write_file(file, doc.dump(2) + "\n");
    return fmt::format("(saved {} messages to {}; /load {} brings them back)", history_.size(), file, file);
  } catch (const Error& e) {
    return fmt::format("error: {}", e.what());
  }
}

std::string Conversation::load(const std::string& what) {
  if (what.empty()) return "usage: /load MODEL or /load FILE.json";
  if (what.size() > 5 && what.compare(what.size() - 5, 5, ".json") == 0 && file_exists(what)) {
    OrderedJson doc = parse_ordered_json(read_file(what), what);
    const OrderedJson* msgs = doc.is_object() && doc.contains("messages") ? &doc["messages"] : nullptr;
    if (!msgs || !msgs->is_array()) fail("{}: not a conversation saved by /save (no 'messages' list)", what);
    for (const OrderedJson& msg : *msgs)
      if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string() || !msg.contains("content") ||
          !msg["content"].is_string())
        fail("{}: every message needs a string 'role' and 'content'", what);
    history_ = *msgs;
    system_ = !history_.empty() && history_[0]["role"] == "system" ? history_[0]["content"].get<std::string>() : "";
    return fmt::format("(loaded {} messages from {})", history_.size(), what);
  }
  ModelArgs next = args_;
  next.model = what;
  std::unique_ptr<RunningModel> fresh = start_model(next, completion_ok_);
  run_ = std::move(fresh);  // only once the new one loaded: a failed /load keeps the old model
  args_ = next;
  return "";
}

void Conversation::reload_as(const std::string& quant, const std::string& device) {
  ModelArgs next = args_;
  next.quant = quant;
  if (!device.empty()) next.device = device;
  next.model = run_->m.path;  // the folder already resolved (a Hub name would be looked up again)
  std::string name = run_->m.name;
  run_.reset();               // one model in memory at a time: a 7B model twice may not fit
  try {
    run_ = start_model(next, completion_ok_);
  } catch (...) {
    run_ = start_model(args_, completion_ok_);  // back to what worked
    throw;
  }
  run_->m.name = name;
  args_.quant = quant;
  args_.device = next.device;
}

}  // namespace kvad::cli
