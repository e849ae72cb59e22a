#include "cli/cli.h"

#include <cstdio>

#include "cli/common.h"
#include "core/error.h"
#include "io/http.h"

namespace kvad::cli {

int main(int argc, char** argv) {
  CLI::App app{"kvad: run, serve and train language models on your own hardware"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "kvad 0.1.0");
  add_run(app);
  add_chat(app);
  add_synth(app);
  add_tokenize(app);
  add_pull(app);
  add_ls(app);
  add_rm(app);
  add_train(app);
  add_score(app);
  add_bench(app);
  add_cache(app);
  add_serve(app);
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
