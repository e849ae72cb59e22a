// libFuzzer: real chat templates (the fixtures' and the corpus's) rendered with an arbitrary JSON
// document as their context: the input is parsed as a request body would be (bounded), its
// "messages" and the rest handed to ChatTemplate::render. Hostile values (deep, huge, shared,
// odd types) must end in a kvad::Error or a render within the budget, never a crash or a hang.
#include <cstddef>
#include <cstdint>
#include <dirent.h>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/chat_template.h"

namespace {
std::vector<kvad::ChatTemplate>& templates() {
  static auto* t = [] {
    auto* v = new std::vector<kvad::ChatTemplate>();
    std::string dir = std::string(KVAD_SOURCE_DIR) + "/fuzz/corpus/chat_template";
    if (DIR* d = opendir(dir.c_str())) {
      while (dirent* e = readdir(d)) {
        std::string n = e->d_name;
        if (n.size() < 7 || n.compare(n.size() - 6, 6, ".jinja") != 0 || n.rfind("feature_", 0) == 0) continue;
        std::ifstream f(dir + "/" + n);
        std::stringstream ss;
        ss << f.rdbuf();
        try {
          v->emplace_back(ss.str(), n);
        } catch (const kvad::Error&) {
        }
      }
      closedir(d);
    }
    return v;
  }();
  return *t;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvad::OrderedJson ctx;
  try {
    ctx = kvad::parse_ordered_json(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz", {64, 1 << 20});
  } catch (const kvad::Error&) {
    return 0;
  }
  kvad::OrderedJson messages = ctx.is_object() && ctx.contains("messages") ? ctx["messages"] : ctx;
  kvad::OrderedJson extra = ctx.is_object() ? ctx : kvad::OrderedJson::object();
  if (extra.is_object()) extra.erase("messages");
  for (const kvad::ChatTemplate& t : templates()) {
    try {
      t.render(messages, true, "<s>", "</s>", extra);
    } catch (const kvad::Error&) {
    }
  }
  return 0;
}
