#pragma once

namespace kvad::cli {
// Parses the command line, runs the subcommand, and turns errors into a message + exit code.
int main(int argc, char** argv);
}  // namespace kvad::cli
