#include "cli/cli.h"

#include <CLI/CLI.hpp>
#include <cstdio>

#include "core/error.h"

namespace kvad::cli {

int main(int argc, char** argv) {
  CLI::App app{"kvad: run, serve and train language models on your own hardware"};
  app.require_subcommand(1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const Error& e) {
    std::fprintf(stderr, "kvad: error: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace kvad::cli
