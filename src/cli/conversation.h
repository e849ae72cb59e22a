// A conversation with a model, as `kvad chat` and `kvad tui` hold it: the model with its engine
// and session, the messages, the sampler settings, and the rules both share (the context filling
// up, /set, saving and loading). Input and output are the caller's: methods return what to tell
// the person.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "cli/common.h"
#include "runtime/generate.h"

namespace kvad::cli {

// A model with its engine and session; members in this order so the session goes first.
struct RunningModel {
  LoadedModel m;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Session> session;
  SpeculativeOptions speculative;  // --draft / --spec
};
// Loads the model the arguments name, with an engine and one session. A model without a chat
// template is refused unless `completion_ok` (the TUI continues plain text then).
std::unique_ptr<RunningModel> start_model(const ModelArgs& args, bool completion_ok = false);

// What chat and tui take on the command line: [MODEL] (or -m), the model and sampling options,
// -c, --system.
struct ConversationArgs {
  ModelArgs model;
  SamplingArgs sampling;
  std::string system;
  std::vector<std::string> words;  // the positional [MODEL]
  bool default_model = false;      // no model named: the shipped default runs
};
void add_conversation_args(CLI::App* cmd, ConversationArgs& a);
// After parsing: the positional model taken, the seed drawn, the default model filled in.
void finish_conversation_args(ConversationArgs& a, const std::string& command);

class Conversation {
 public:
  Conversation(ModelArgs model, SamplingArgs sampling, std::string system, bool completion_ok = false);

  const RunningModel& running() const { return *run_; }
  const ModelArgs& model_args() const { return args_; }
  const SamplingArgs& sampling() const { return sampling_; }
  const OrderedJson& messages() const { return history_; }
  const GenerateResult* last() const { return have_last_ ? &last_ : nullptr; }
  uint64_t last_seed() const { return last_seed_; }

  // One turn: the message is added, the oldest turns dropped if the context needs it (`notice`
  // says so), the answer streamed to `on_text` (return false to stop) and kept. Throws Error when
  // the message cannot fit or generation fails; the message is then not kept.
  GenerateResult say(const std::string& text, const std::function<bool(const std::string&)>& on_text, std::string& notice);

  void reset();
  std::string set(const std::string& rest);  // "/set" arguments; returns what to print
  std::string save(const std::string& file) const;
  // A conversation file saved by save() (FILE.json), or another model that keeps the
  // conversation; the old model stays when the new one fails (the Error says why).
  std::string load(const std::string& what);
  // Reloads the same model in another weight format (--quant) on `device` (--device; "" = the
  // same), keeping the conversation.
  void reload_as(const std::string& quant, const std::string& device = "");

 private:
  std::vector<int32_t> fit_context(std::string& notice);
  std::vector<int32_t> render() const;

  ModelArgs args_;
  SamplingArgs sampling_;
  std::string system_;
  bool completion_ok_;
  std::unique_ptr<RunningModel> run_;
  OrderedJson history_ = OrderedJson::array();
  GenerateResult last_;
  uint64_t last_seed_ = 0;
  bool have_last_ = false;
  uint64_t turn_ = 0;
};

}  // namespace kvad::cli
