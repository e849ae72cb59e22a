#include "cli/cli.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/common.h"
#include "core/error.h"
#include "io/http.h"

namespace kvad::cli {

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); j++) row[j] = j;
  for (size_t i = 1; i <= a.size(); i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); j++) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

// What CLI11 would get wrong or say unhelpfully, checked before it parses:
//  - an unknown command ("A subcommand is required" otherwise): name it and suggest the nearest;
//  - a multi-letter option with one dash (llama.cpp's -ngl, -np, -fa): CLI11 would read it as -n
//    with the value "gl"; kvad has no grouped short options, so it is an unknown option.
// Returns the message, or "" when the command line is for CLI11.
std::string precheck(CLI::App& app, int argc, char** argv) {
  std::vector<std::string> names;
  const CLI::App& all = app;  // the const overload: CLI11's two get_subcommands are ambiguous on a non-const App
  for (const CLI::App* sub : all.get_subcommands([](const CLI::App*) { return true; })) names.push_back(sub->get_name());
  CLI::App* sub = nullptr;
  for (int i = 1; i < argc; i++) {
    std::string tok = argv[i];
    if (tok == "--") break;
    if (!sub && !tok.empty() && tok[0] != '-') {
      if (std::find(names.begin(), names.end(), tok) == names.end()) {
        std::string best;
        size_t d = 3;
        for (const std::string& n : names)
          if (size_t e = edit_distance(tok, n); e < d) d = e, best = n;
        std::string msg = fmt::format("unknown command '{}'", tok.substr(0, 40));
        return msg + (best.empty() ? " (kvad --help lists them)" : fmt::format(" (did you mean '{}'?)", best));
      }
      sub = app.get_subcommand(tok);
      continue;
    }
    bool grouped = tok.size() > 2 && tok[0] == '-' && tok[1] != '-' &&
                   std::all_of(tok.begin() + 1, tok.end(), [](unsigned char c) { return std::isalpha(c); });
    if (!grouped) continue;
    // A value of the option before it (e.g. --stop -xyz) is not an option.
    std::string prev = argv[i - 1];
    if (prev.size() > 1 && prev[0] == '-' && prev.find('=') == std::string::npos) {
      const CLI::Option* o = (sub ? sub : &app)->get_option_no_throw(prev);
      if (o && o->get_items_expected_min() > 0) continue;
    }
    return fmt::format("unknown option '{}' (kvad's short options are single letters{})", tok.substr(0, 40),
                       sub ? fmt::format("; kvad {} --help lists them", sub->get_name()) : "");
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvad: run, serve and train language models on your own hardware"};
  app.require_subcommand(1);
  app.set_version_flag("-v,--version", std::string("kvad ") + KVAD_VERSION);
  add_run(app);
  add_chat(app);
  add_tui(app);
  add_synth(app);
  add_tokenize(app);
  add_pull(app);
  add_ls(app);
  add_show(app);
  add_rm(app);
  add_train(app);
  add_score(app);
  add_bench(app);
  add_cache(app);
  add_devices(app);
  add_serve(app);
  add_cluster(app);
  add_images(app);
  if (std::string bad = precheck(app, argc, argv); !bad.empty()) {
    std::fprintf(stderr, "kvad: %s\n", bad.c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  } catch (const Cancelled& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "kvad: %s\n", e.what());
    return 130;
  } catch (const Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "kvad: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "kvad: error: out of memory\n");
    return 1;
  }
  return 0;
}

}  // namespace kvad::cli
