// ChatTemplate: the variables transformers' apply_chat_template passes to the template, on top
// of the Jinja engine (jinja.h).
//
// transformers renders with messages, tools (None when not given), documents (None),
// add_generation_prompt, the special tokens and any extra keyword arguments; raise_exception and
// strftime_now are globals. Extra keys override the defaults, as kwargs do there.
//
// strftime_now normally formats the current local time. For reproducible renderings (tests,
// golden files) `extra` may carry "__kvad_now": "YYYY-MM-DD" or "YYYY-MM-DDTHH:MM:SS"; that key
// is consumed here and never reaches the template.
#include "tokenizer/chat_template.h"

#include <cstdio>

#include "core/error.h"
#include "tokenizer/jinja.h"

namespace kvad {

namespace {

constexpr const char* kNowKey = "__kvad_now";

std::tm parse_now(const OrderedJson& v, const std::string& what) {
  if (!v.is_string()) fail("{}: extra.{} must be a string \"YYYY-MM-DD[THH:MM:SS]\"", what, kNowKey);
  const std::string& s = v.get_ref<const std::string&>();
  std::tm tm{};
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0;
  int n = std::sscanf(s.c_str(), "%d-%d-%dT%d:%d:%d", &y, &mo, &d, &h, &mi, &sec);
  if ((n != 3 && n != 6) || mo < 1 || mo > 12 || d < 1 || d > 31 || h < 0 || h > 23 || mi < 0 || mi > 59 ||
      sec < 0 || sec > 60)
    fail("{}: extra.{} must look like \"2024-07-26\" or \"2024-07-26T12:00:00\", got \"{}\"", what, kNowKey, s);
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = sec;
  tm.tm_isdst = -1;
  std::tm norm = tm;
  timegm(&norm);  // fills in the weekday and day of the year for %a, %A, %j
  tm.tm_wday = norm.tm_wday;
  tm.tm_yday = norm.tm_yday;
  return tm;
}

}  // namespace

struct ChatTemplate::Impl {
  jinja::Template tpl;
  std::string what;
  std::string source;
};

ChatTemplate::ChatTemplate(const std::string& source, const std::string& what)
    : impl_(std::make_unique<Impl>(Impl{jinja::Template(source, what), what, source})) {}

const std::string& ChatTemplate::source() const { return impl_->source; }

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const OrderedJson& messages, bool add_generation_prompt, const std::string& bos_token,
                                 const std::string& eos_token, const OrderedJson& extra) const {
  if (!extra.is_null() && !extra.is_object()) fail("{}: chat template variables must be a JSON object", impl_->what);
  std::vector<std::pair<std::string, jinja::Value>> vars;
  vars.emplace_back("messages", jinja::from_json(messages));
  vars.emplace_back("tools", jinja::Value::none());
  vars.emplace_back("documents", jinja::Value::none());
  vars.emplace_back("add_generation_prompt", jinja::Value(add_generation_prompt));
  vars.emplace_back("bos_token", jinja::Value(bos_token));
  vars.emplace_back("eos_token", jinja::Value(eos_token));
  jinja::RenderOptions opts;
  if (extra.is_object()) {
    for (auto it = extra.begin(); it != extra.end(); ++it) {
      if (it.key() == kNowKey) {
        opts.now = parse_now(it.value(), impl_->what);
        continue;
      }
      jinja::Value v = jinja::from_json(it.value());
      bool replaced = false;
      for (auto& kv : vars)
        if (kv.first == it.key()) {
          kv.second = v;
          replaced = true;
        }
      if (!replaced) vars.emplace_back(it.key(), std::move(v));
    }
  }
  return impl_->tpl.render(vars, opts);
}

}  // namespace kvad
