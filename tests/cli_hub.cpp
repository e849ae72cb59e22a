// kvad pull / ls / rm and --model ORG/NAME as users run them, against the in-process test Hub
// (loopback only), with a real synthesized model: pull, then run offline; --pull; the messages for
// a missing model; Ctrl-C during a download; a cache written "by Python" loads in kvad.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "hf_layout_reader.h"
#include "test_hub.h"
#include "test_support.h"

extern char** environ;

using kvad::test::HubFile;
using kvad::test::run_kvad;
using kvad::test::TestHub;
namespace fs = std::filesystem;

namespace {

const std::string kRepo = "kvad-test/Tiny-Qwen2";

std::string slurp(const std::string& p) { return kvad::test::hf_slurp(p); }

// The synthesized model's files, made once per test binary.
const std::map<std::string, std::string>& synth_files() {
  static std::map<std::string, std::string> files = [] {
    std::string dir = kvad::test::temp_dir("synth");
    auto r = run_kvad("synth --arch qwen2 --preset tiny --max-shard-size 8MB --out '" + dir + "'");
    if (r.exit_code != 0) throw std::runtime_error("synth failed: " + r.err);
    std::map<std::string, std::string> m;
    for (auto& e : fs::directory_iterator(dir)) m[e.path().filename().string()] = slurp(e.path().string());
    return m;
  }();
  return files;
}

std::map<std::string, HubFile> as_repo(const std::map<std::string, std::string>& files) {
  std::map<std::string, HubFile> out;
  for (auto& [p, b] : files) out[p] = {b, b.size() > 1000000};  // big files are LFS, as on the Hub
  out["README.md"] = {"---\nlicense: apache-2.0\n---\n# tiny\n", false};
  return out;
}

struct CliHub : ::testing::Test {
  TestHub hub;
  std::string home = kvad::test::temp_dir("home");
  std::string commit;

  void SetUp() override {
    commit = hub.add_commit(kRepo, as_repo(synth_files()));
    setenv("HF_HOME", (home + "/hf").c_str(), 1);
    setenv("KVAD_HOME", (home + "/kvad").c_str(), 1);
    setenv("HF_ENDPOINT", hub.endpoint().c_str(), 1);
    for (const char* v : {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE",
                          "TRANSFORMERS_OFFLINE", "HF_TOKEN_PATH"})
      unsetenv(v);
  }
  void TearDown() override {
    for (const char* v : {"HF_HOME", "KVAD_HOME", "HF_ENDPOINT", "HF_HUB_OFFLINE", "HF_HUB_DOWNLOAD_TIMEOUT"}) unsetenv(v);
  }
  std::string repo_dir(const std::string& repo = kRepo) const {
    std::string f = repo;
    f.replace(f.find('/'), 1, "--");
    return home + "/hf/hub/models--" + f;
  }
  static bool exists(const std::string& p) {
    struct stat st {};
    return ::lstat(p.c_str(), &st) == 0;
  }
  std::string ls_json() {
    auto r = run_kvad("ls --json");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  }
};

TEST_F(CliHub, PullThenRunOfflineAndListIt) {
  auto r = run_kvad("pull " + kRepo);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(kRepo + "@" + commit.substr(0, 12)), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(repo_dir() + "/snapshots/" + commit), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("downloading"), std::string::npos) << r.err;

  // The snapshot, read back by huggingface_hub's rules.
  kvad::test::HfLayoutReader rd{home + "/hf/hub", kRepo};
  std::string err;
  EXPECT_EQ(rd.commit_for("main", &err), commit);
  for (auto& [p, bytes] : synth_files()) {
    EXPECT_EQ(rd.check_file(commit, p, bytes.size() > 1000000, &err), bytes) << p;
    EXPECT_EQ(err, "") << p;
  }
  EXPECT_FALSE(exists(repo_dir() + "/snapshots/" + commit + "/README.md"));

  hub.clear_requests();
  setenv("HF_HUB_OFFLINE", "1", 1);
  r = run_kvad("run --model " + kRepo + " --prompt Hello -n 4 --seed 1 --temperature 0");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(hub.requests().empty());
  // The same output as from the folder itself.
  auto direct = run_kvad("run --model '" + repo_dir() + "/snapshots/" + commit + "' --prompt Hello -n 4 --seed 1 --temperature 0");
  EXPECT_EQ(r.out, direct.out);
  r = run_kvad("tokenize --model " + kRepo + " Hello");
  EXPECT_EQ(r.exit_code, 0) << r.err;

  std::string ls = ls_json();
  EXPECT_NE(ls.find("\"name\":\"" + kRepo + "\""), std::string::npos) << ls;
  EXPECT_NE(ls.find("\"arch\":\"Qwen2ForCausalLM\""), std::string::npos) << ls;
  EXPECT_NE(ls.find("\"format\":\"safetensors bf16\""), std::string::npos) << ls;
  EXPECT_EQ(ls.find("\"last_used\":0"), std::string::npos) << ls;  // the run above was recorded
  auto table = run_kvad("ls");
  EXPECT_NE(table.out.find("NAME"), std::string::npos);
  EXPECT_NE(table.out.find("LAST USED"), std::string::npos);
  EXPECT_NE(table.out.find("9.8M"), std::string::npos) << table.out;  // parameters from the headers
  EXPECT_NE(table.out.find("just now"), std::string::npos) << table.out;
}

TEST_F(CliHub, MissingModelSaysHowToPullIt) {
  auto r = run_kvad("run --model kvad-test/Not-Here --prompt x -n 1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("run `kvad pull kvad-test/Not-Here`"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--pull"), std::string::npos) << r.err;
  r = run_kvad("run --model 'bad--org/x' --prompt x -n 1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cannot contain '--'"), std::string::npos) << r.err;
  r = run_kvad("pull 'Qwen/Qwen2.5 0.5B'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("has the character ' '"), std::string::npos) << r.err;
  r = run_kvad("pull kvad-test/Tiny-Qwen2@");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("revision after '@' is empty"), std::string::npos) << r.err;
  r = run_kvad("pull kvad-test/Tiny-Qwen2@no-such-branch");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("revision 'no-such-branch' not found"), std::string::npos) << r.err;
  r = run_kvad("pull kvad-test/Unknown");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no such model"), std::string::npos) << r.err;
  EXPECT_FALSE(exists(repo_dir("kvad-test/Unknown") + "/refs"));
}

TEST_F(CliHub, GatedModelExplainsAccess) {
  hub.set_gated(kRepo, "hf_granted");
  auto r = run_kvad("pull " + kRepo);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("request access at " + hub.endpoint() + "/" + kRepo), std::string::npos) << r.err;
  setenv("HF_TOKEN", "hf_granted", 1);
  r = run_kvad("pull --quiet " + kRepo);
  unsetenv("HF_TOKEN");
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST_F(CliHub, PullFlagDownloadsOnlyWhenMissing) {
  auto r = run_kvad("run --pull --model " + kRepo + " --prompt Hi -n 2 --seed 3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("pulling it"), std::string::npos) << r.err;
  hub.clear_requests();
  r = run_kvad("run --pull --model " + kRepo + " --prompt Hi -n 2 --seed 3");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(hub.requests().empty());  // already here: no network at all
}

TEST_F(CliHub, CtrlCLeavesNoPartialFileWhereACompleteOneIsExpected) {
  std::string shard;
  for (auto& [p, b] : synth_files())
    if (p.find(".safetensors") != std::string::npos && p.find("index") == std::string::npos && shard.empty()) shard = p;
  ASSERT_FALSE(shard.empty());
  std::string sha = kvad::test::hf_digest(synth_files().at(shard), true);
  hub.trickle(sha, 16384, 20);  // ~0.8 MB/s: several seconds for the shard

  std::string out = home + "/pull.out", errf = home + "/pull.err";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, errf.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::string bin = KVAD_BINARY;
  char* argv[] = {bin.data(), (char*)"pull", (char*)kRepo.c_str(), nullptr};
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, bin.c_str(), &fa, nullptr, argv, environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  std::string part = repo_dir() + "/blobs/" + sha + ".incomplete";
  auto t0 = std::chrono::steady_clock::now();
  while (!(exists(part) && fs::file_size(part) > 100000) && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(exists(part)) << slurp(errf);
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 130) << slurp(errf);
  EXPECT_NE(slurp(errf).find("kvad: interrupted"), std::string::npos) << slurp(errf);
  EXPECT_FALSE(exists(repo_dir() + "/snapshots/" + commit + "/" + shard));
  EXPECT_FALSE(exists(repo_dir() + "/blobs/" + sha));
  EXPECT_FALSE(exists(repo_dir() + "/refs/main"));
  uint64_t kept = fs::file_size(part);
  EXPECT_GT(kept, 0u);
  auto r = run_kvad("run --model " + kRepo + " --prompt x -n 1");
  EXPECT_EQ(r.exit_code, 1);  // an interrupted pull is not a model
  EXPECT_NE(r.err.find("kvad pull " + kRepo), std::string::npos) << r.err;

  hub.trickle(sha, 0, 0);
  hub.clear_requests();
  r = run_kvad("pull " + kRepo);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  bool resumed = false;
  for (auto& rq : hub.requests())
    if (rq.server == "cdn" && rq.path.find(sha) != std::string::npos) resumed = rq.range.rfind("bytes=", 0) == 0;
  EXPECT_TRUE(resumed);
  EXPECT_NE(r.err.find("resuming at"), std::string::npos) << r.err;
}

TEST_F(CliHub, RemoveShowsWhatItFreesAndForgetsNqCaches) {
  ASSERT_EQ(run_kvad("pull --quiet " + kRepo).exit_code, 0);
  fs::create_directories(home + "/kvad/cache");
  std::ofstream(home + "/kvad/cache/kvad-test--Tiny-Qwen2.q4.nq") << "cache";
  std::ofstream(home + "/kvad/cache/other--Model.q4.nq") << "keep";
  std::ofstream(home + "/kvad/cache/kvad-test--Tiny-Qwen2.5.q4.nq") << "keep";  // another repo, same prefix
  auto r = run_kvad("rm " + kRepo, "n\n");
  EXPECT_EQ(r.exit_code, 0);  // answered no: nothing happens, and that is not an error (as rm -i)
  EXPECT_NE(r.err.find("not removed"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("frees"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("1 .nq cache"), std::string::npos) << r.err;
  EXPECT_TRUE(exists(repo_dir()));
  r = run_kvad("rm " + kRepo, "y\n");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("removed " + kRepo), std::string::npos) << r.out;
  EXPECT_FALSE(exists(repo_dir()));
  EXPECT_FALSE(exists(home + "/kvad/cache/kvad-test--Tiny-Qwen2.q4.nq"));
  EXPECT_TRUE(exists(home + "/kvad/cache/other--Model.q4.nq"));
  EXPECT_TRUE(exists(home + "/kvad/cache/kvad-test--Tiny-Qwen2.5.q4.nq"));
  r = run_kvad("rm --yes " + kRepo);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("not in the Hugging Face cache"), std::string::npos) << r.err;
}

TEST_F(CliHub, RemoveOneRevisionKeepsSharedBlobs) {
  auto v2 = as_repo(synth_files());
  v2["generation_config.json"].bytes = R"({"eos_token_id": 7})";
  std::string dev = hub.add_commit(kRepo, v2, "dev");
  ASSERT_EQ(run_kvad("pull --quiet " + kRepo).exit_code, 0);
  ASSERT_EQ(run_kvad("pull --quiet " + kRepo + "@dev").exit_code, 0);
  auto r = run_kvad("rm --yes " + kRepo + "@dev");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("1 blob(s)"), std::string::npos) << r.err;  // only the changed generation_config.json
  EXPECT_FALSE(exists(repo_dir() + "/snapshots/" + dev));
  EXPECT_FALSE(exists(repo_dir() + "/refs/dev"));
  setenv("HF_HUB_OFFLINE", "1", 1);
  r = run_kvad("run --model " + kRepo + " --prompt Hi -n 2 --seed 1");
  EXPECT_EQ(r.exit_code, 0) << r.err;  // main still complete
}

TEST_F(CliHub, GgufFileIsPulledListedAndRunFromTheCache) {
  auto files = as_repo(synth_files());
  files["tiny-Q4_K_S.gguf"] = {TestHub::random_bytes(3000, 9), true};
  files["tiny-Q8_0.gguf"] = {TestHub::random_bytes(4000, 10), true};
  hub.add_commit("kvad-test/Tiny-gguf", files);
  auto r = run_kvad("pull kvad-test/Tiny-gguf:Q4_K_S");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(exists(repo_dir("kvad-test/Tiny-gguf") + "/refs/main"));
  std::string ls = ls_json();
  EXPECT_NE(ls.find("\"name\":\"kvad-test/Tiny-gguf:tiny-Q4_K_S.gguf\""), std::string::npos) << ls;
  EXPECT_NE(ls.find("gguf (unreadable)"), std::string::npos) << ls;  // random bytes, not a real GGUF
  r = run_kvad("run --model kvad-test/Tiny-gguf:Q4_K_S --prompt x -n 1");  // the cached file is what runs
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("tiny-Q4_K_S.gguf: not a GGUF file"), std::string::npos) << r.err;
  r = run_kvad("rm --yes kvad-test/Tiny-gguf:Q4_K_S");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ls_json().find("Tiny-gguf:"), std::string::npos);
}

// A cache laid out the way huggingface_hub writes it (built here by hand, from its documented
// rules) is used by kvad offline, and kvad ls names unsupported architectures.
TEST_F(CliHub, ModelDownloadedByPythonLoadsOffline) {
  std::string repo = home + "/hf/hub/models--py-org--Py-Model";
  std::string snap_commit = "0123456789abcdef0123456789abcdef01234567";
  fs::create_directories(repo + "/blobs");
  fs::create_directories(repo + "/refs");
  fs::create_directories(repo + "/snapshots/" + snap_commit);
  for (auto& [p, bytes] : synth_files()) {
    bool lfs = bytes.size() > 1000000;
    std::string etag = kvad::test::hf_digest(bytes, lfs);
    std::ofstream(repo + "/blobs/" + etag, std::ios::binary) << bytes;
    fs::create_symlink("../../blobs/" + etag, repo + "/snapshots/" + snap_commit + "/" + p);
  }
  std::ofstream(repo + "/refs/main") << snap_commit;  // no newline, like huggingface_hub
  setenv("HF_HUB_OFFLINE", "1", 1);
  auto r = run_kvad("run --model py-org/Py-Model --prompt Hello -n 3 --seed 2");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = run_kvad("run --model py-org/Py-Model@" + snap_commit + " --prompt Hello -n 3 --seed 2");
  EXPECT_EQ(r.exit_code, 0) << r.err;

  std::string other = home + "/hf/hub/models--py-org--Mamba/snapshots/" + snap_commit;
  fs::create_directories(other);
  std::ofstream(other + "/config.json") << R"({"architectures":["MambaForCausalLM"],"model_type":"mamba"})";
  std::ofstream(home + "/hf/hub/models--py-org--Mamba/refs/main") << snap_commit;
  std::string ls = ls_json();
  EXPECT_NE(ls.find("\"name\":\"py-org/Py-Model\""), std::string::npos) << ls;
  EXPECT_NE(ls.find("unsupported: MambaForCausalLM"), std::string::npos) << ls;
  EXPECT_EQ(hub.requests().size(), 0u);
}

}  // namespace
