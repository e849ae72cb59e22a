#include "test_support.h"

#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "core/error.h"
#include "core/json.h"

namespace kvad::test {

// The checkout the tests were built from, or KVAD_SOURCE_DIR when set: the GPU tests run on a lent
// machine from another path (bench/gpu/device.sh).
std::string source_path(const std::string& rel) {
  const char* moved = std::getenv("KVAD_SOURCE_DIR");
  return std::string(moved && *moved ? moved : KVAD_SOURCE_DIR) + "/" + rel;
}

std::string read_gzip_file(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error("cannot open " + path);
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, (size_t)n);
  gzclose(f);
  if (n < 0) throw std::runtime_error(path + ": not a valid gzip file");
  return out;
}

namespace {
struct TempRoot {
  std::string path;
  TempRoot() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/kvad-test-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back(0);
    if (!mkdtemp(buf.data())) std::abort();
    path = buf.data();
  }
  ~TempRoot() {
    if (!std::getenv("KVAD_KEEP_TEST_FILES")) {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  }
};
TempRoot& root() {
  static TempRoot r;
  return r;
}
std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
}  // namespace

std::string temp_dir(const std::string& tag) {
  static int counter = 0;
  std::string p = root().path + "/" + tag + "-" + std::to_string(counter++);
  std::filesystem::create_directories(p);
  return p;
}

void write_chat_jsonl(const std::string& path, int n, const std::function<std::pair<std::string, std::string>(int)>& turn) {
  std::ofstream f(path);
  for (int i = 0; i < n; i++) {
    auto [user, assistant] = turn(i);
    f << Json({{"messages", {{{"role", "user"}, {"content", user}}, {{"role", "assistant"}, {"content", assistant}}}}})
             .dump()
      << "\n";
  }
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

namespace {
RunResult run_kvad_command(const std::string& launcher, const std::string& args, const std::string& stdin_text) {
  std::string dir = temp_dir("run");
  std::string in = dir + "/stdin", out = dir + "/stdout", err = dir + "/stderr";
  std::ofstream(in, std::ios::binary) << stdin_text;
  std::string cmd = launcher + " '" + KVAD_BINARY + "' " + args + " <'" + in + "' >'" + out + "' 2>'" + err + "'";
  int status = std::system(cmd.c_str());
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}
}  // namespace

RunResult run_kvad(const std::string& args, const std::string& stdin_text) { return run_kvad_command("", args, stdin_text); }

RunResult run_kvad_under(const std::string& launcher, const std::string& args) {
  return run_kvad_command(launcher, args, "");
}

}  // namespace kvad::test
