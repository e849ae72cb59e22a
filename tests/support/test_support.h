// Shared helpers for the tests: paths to fixtures, temporary directories, running the kvad binary.
#pragma once
#include <functional>
#include <string>
#include <utility>

namespace kvad::test {

// Absolute path of a file under the source tree (e.g. "tests/fixtures/tokenizers/qwen3").
std::string source_path(const std::string& rel);
// The contents of a gzip file (fixtures too large to keep as text: tokenizers/gemma3).
std::string read_gzip_file(const std::string& path);
// A fresh empty directory under the build's temp area; removed at process exit.
std::string temp_dir(const std::string& tag);

// Writes chat JSONL (kvad train --lora's data): n conversations of one user message and one
// assistant reply, conversation i's from turn(i) = {user, assistant}.
void write_chat_jsonl(const std::string& path, int n, const std::function<std::pair<std::string, std::string>(int)>& turn);

// The message of the kvad::Error f() throws, or "(no error)".
std::string error_of(const std::function<void()>& f);

struct RunResult {
  int exit_code = -1;
  std::string out, err;
};
// Runs the kvad binary with arguments (shell-quoted for you); captures stdout and stderr.
RunResult run_kvad(const std::string& args, const std::string& stdin_text = "");
// The same, started by a launcher command line (e.g. "mpirun -np 2"): `LAUNCHER kvad ARGS`.
RunResult run_kvad_under(const std::string& launcher, const std::string& args);

}  // namespace kvad::test
