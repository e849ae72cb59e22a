// kvad: one binary, many subcommands (src/cli/).
#include "cli/cli.h"

int main(int argc, char** argv) { return kvad::cli::main(argc, argv); }
