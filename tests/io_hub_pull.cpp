// The Hub client against the in-process test Hub (tests/support/test_hub.h), on loopback only:
// layout, redirects, resume, verification, auth errors, timeouts, cancellation, offline mode.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/error.h"
#include "core/fs.h"
#include "hf_layout_reader.h"
#include "io/hub.h"
#include "io/http.h"
#include "test_hub.h"
#include "test_support.h"

using namespace kvad;
using namespace kvad::hf;
using kvad::test::HubFile;
using kvad::test::TestHub;
namespace fs = std::filesystem;

namespace {

const std::string kRepo = "kvad-test/Tiny-Model";

std::map<std::string, HubFile> tiny_model(uint32_t seed = 1) {
  std::map<std::string, HubFile> f;
  f["config.json"] = {R"({"architectures":["Qwen2ForCausalLM"],"model_type":"qwen2","hidden_size":64})", false};
  f["generation_config.json"] = {R"({"eos_token_id":2})", false};
  f["tokenizer.json"] = {R"({"version":"1.0","model":{"type":"BPE","vocab":{},"merges":[]}})", false};
  f["tokenizer_config.json"] = {R"({"model_max_length":128})", false};
  f["README.md"] = {"# tiny\n", false};
  f[".gitattributes"] = {"*.safetensors filter=lfs diff=lfs merge=lfs -text\n", false};
  f["model-00001-of-00002.safetensors"] = {TestHub::random_bytes(300000, seed), true};
  f["model-00002-of-00002.safetensors"] = {TestHub::random_bytes(200000, seed + 100), true};
  f["model.safetensors.index.json"] = {
      R"({"metadata":{"total_size":500000},"weight_map":{"a.weight":"model-00001-of-00002.safetensors",)"
      R"("b.weight":"model-00002-of-00002.safetensors","c.weight":"model-00001-of-00002.safetensors"}})",
      false};
  f["pytorch_model.bin"] = {TestHub::random_bytes(1000, seed + 200), true};
  f["gguf/tiny-Q4_K_M.gguf"] = {TestHub::random_bytes(5000, seed + 300), true};
  f["tiny-Q8_0.gguf"] = {TestHub::random_bytes(7000, seed + 400), true};
  return f;
}

const std::vector<std::string> kPulled = {"config.json",
                                          "generation_config.json",
                                          "tokenizer.json",
                                          "tokenizer_config.json",
                                          "model.safetensors.index.json",
                                          "model-00001-of-00002.safetensors",
                                          "model-00002-of-00002.safetensors"};

std::string sha(const std::string& bytes) { return kvad::test::hf_digest(bytes, true); }

struct HubTest : ::testing::Test {
  TestHub hub;
  std::string cache = kvad::test::temp_dir("hfcache");
  std::map<std::string, HubFile> files = tiny_model();
  std::string commit;
  HubConfig cfg;

  void SetUp() override {
    commit = hub.add_commit(kRepo, files);
    cfg.endpoint = hub.endpoint();
    cfg.cache_dir = cache;
    cfg.metadata_timeout_s = 5;
    cfg.download_timeout_s = 2;
    cfg.retries = 3;
    cfg.retry_wait_s = 0.02;
  }
  PullResult pull_ref(const std::string& ref) { return pull(cfg, parse_repo_ref(ref)); }
  std::string error_of(const std::string& ref) {
    try {
      pull_ref(ref);
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  }
  std::string repo_dir() const { return cache + "/models--kvad-test--Tiny-Model"; }
  std::string blob(const std::string& path) const { return repo_dir() + "/blobs/" + sha(files.at(path).bytes); }
  bool exists(const std::string& p) const {
    struct stat st {};
    return ::lstat(p.c_str(), &st) == 0;
  }
  int incomplete_files() const {
    int n = 0;
    std::error_code ec;
    for (auto& e : fs::directory_iterator(repo_dir() + "/blobs", ec))
      if (e.path().string().find(".incomplete") != std::string::npos) n++;
    return n;
  }
};

TEST_F(HubTest, PullWritesTheLayoutHuggingfaceHubReads) {
  PullResult r = pull_ref(kRepo);
  EXPECT_EQ(r.commit, commit);
  EXPECT_EQ(r.files_downloaded, (int)kPulled.size());
  EXPECT_EQ(r.snapshot_dir, repo_dir() + "/snapshots/" + commit);

  // Read it back by huggingface_hub's rules, with no kvad code.
  kvad::test::HfLayoutReader rd{cache, kRepo};
  std::string err;
  EXPECT_EQ(rd.commit_for("main", &err), commit);
  EXPECT_EQ(err, "");
  for (const std::string& p : kPulled) {
    std::string bytes = rd.check_file(commit, p, files[p].lfs, &err);
    EXPECT_EQ(err, "") << p;
    EXPECT_EQ(bytes, files[p].bytes) << p;
  }
  // Only what the model needs: no README, no pickles, no GGUF.
  for (const char* p : {"README.md", "pytorch_model.bin", "tiny-Q8_0.gguf", ".gitattributes"})
    EXPECT_FALSE(exists(r.snapshot_dir + "/" + p)) << p;
  EXPECT_EQ(incomplete_files(), 0);
  // Large files came from the second host, small ones from the Hub itself.
  EXPECT_EQ(hub.count("cdn", "GET", "/lfs/"), 2);
  EXPECT_EQ(hub.count("hub", "GET", "/api/models/" + kRepo + "/revision/main"), 1);
  // The lock huggingface_hub also takes for a blob lives in .locks/.
  EXPECT_TRUE(exists(cache + "/.locks/models--kvad-test--Tiny-Model/" + sha(files["model-00001-of-00002.safetensors"].bytes) + ".lock"));
  // tokenizer files the repo does not have are remembered as absent, as huggingface_hub does.
  EXPECT_TRUE(exists(repo_dir() + "/.no_exist/" + commit + "/special_tokens_map.json"));
}

TEST_F(HubTest, SecondPullDownloadsNothing) {
  pull_ref(kRepo);
  hub.clear_requests();
  PullResult r = pull_ref(kRepo);
  EXPECT_EQ(r.files_downloaded, 0);
  EXPECT_EQ(r.bytes_downloaded, 0u);
  EXPECT_EQ(hub.count("cdn", "GET"), 0);
  EXPECT_EQ(hub.count("hub", "HEAD"), 0);
  EXPECT_EQ(hub.count("hub", "GET"), 1);  // the revision is still resolved
}

TEST_F(HubTest, TokenGoesToTheHubButNotToTheFileHost) {
  hub.set_private(kRepo, "secret-token");
  cfg.token = "secret-token";
  pull_ref(kRepo);
  for (const auto& rq : hub.requests()) {
    if (rq.server == "hub") EXPECT_EQ(rq.authorization, "Bearer secret-token") << rq.path;
    else EXPECT_EQ(rq.authorization, "") << rq.path;
  }
}

TEST_F(HubTest, CutDownloadIsResumedWithARangeRequest) {
  const std::string shard = "model-00001-of-00002.safetensors";
  hub.cut_after(sha(files[shard].bytes), 150000);
  pull_ref(kRepo);
  std::vector<std::string> ranges;
  for (const auto& rq : hub.requests())
    if (rq.server == "cdn" && rq.path.find(sha(files[shard].bytes)) != std::string::npos) ranges.push_back(rq.range);
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[0], "");
  EXPECT_EQ(ranges[1], "bytes=150000-");
  EXPECT_EQ(hub.cdn_bytes_sent(), 500000u);  // nothing sent twice
  std::string err;
  EXPECT_EQ((kvad::test::HfLayoutReader{cache, kRepo}.check_file(commit, shard, true, &err)), files[shard].bytes);
  EXPECT_EQ(err, "");
}

TEST_F(HubTest, InterruptedPullResumesInTheNextRun) {
  const std::string shard = "model-00002-of-00002.safetensors";
  hub.cut_after(sha(files[shard].bytes), 80000, 10);
  cfg.retries = 0;
  std::string e = error_of(kRepo);
  EXPECT_NE(e.find("partial file is kept"), std::string::npos) << e;
  // Nothing where a complete file is expected: no blob, no link, no ref.
  EXPECT_FALSE(exists(blob(shard)));
  EXPECT_FALSE(exists(repo_dir() + "/snapshots/" + commit + "/" + shard));
  EXPECT_FALSE(exists(repo_dir() + "/refs/main"));
  EXPECT_EQ(fs::file_size(blob(shard) + ".incomplete"), 80000u);
  // An offline look-up does not take the partial snapshot for a model.
  auto cached = find_cached(cache, parse_repo_ref(kRepo));
  EXPECT_FALSE(cached.has_value());

  hub.cut_after(sha(files[shard].bytes), 0, 0);
  hub.clear_requests();
  PullResult r = pull_ref(kRepo);
  EXPECT_EQ(r.files_downloaded, 1);  // the index came in the first run
  EXPECT_EQ(hub.count("cdn", "GET"), 1);
  EXPECT_EQ(hub.requests().back().range, "bytes=80000-");
  EXPECT_EQ(r.bytes_downloaded, 120000u);
  EXPECT_EQ(incomplete_files(), 0);
  EXPECT_TRUE(exists(repo_dir() + "/refs/main"));
}

TEST_F(HubTest, ServerIgnoringRangeRestartsTheFile) {
  const std::string shard = "model-00001-of-00002.safetensors";
  hub.cut_after(sha(files[shard].bytes), 100000);
  hub.set_ignore_range(true);
  pull_ref(kRepo);
  std::string err;
  EXPECT_EQ((kvad::test::HfLayoutReader{cache, kRepo}.check_file(commit, shard, true, &err)), files[shard].bytes);
  EXPECT_EQ(err, "");
}

TEST_F(HubTest, BytesThatDoNotMatchTheHashAreRejected) {
  const std::string shard = "model-00001-of-00002.safetensors";
  hub.corrupt(sha(files[shard].bytes));
  std::string e = error_of(kRepo);
  EXPECT_NE(e.find("do not match the Hub's sha256"), std::string::npos) << e;
  EXPECT_NE(e.find(shard), std::string::npos) << e;
  EXPECT_FALSE(exists(blob(shard)));
  EXPECT_FALSE(exists(blob(shard) + ".incomplete"));
  EXPECT_FALSE(exists(repo_dir() + "/snapshots/" + commit + "/" + shard));
  EXPECT_FALSE(exists(repo_dir() + "/refs/main"));
}

TEST_F(HubTest, StalePartialFileIsDroppedWhenItDoesNotVerify) {
  const std::string shard = "model-00001-of-00002.safetensors";
  fs::create_directories(repo_dir() + "/blobs");
  std::ofstream(blob(shard) + ".incomplete", std::ios::binary) << std::string(1000, 'x');  // junk prefix
  PullResult r = pull_ref(kRepo);
  std::string err;
  EXPECT_EQ((kvad::test::HfLayoutReader{cache, kRepo}.check_file(commit, shard, true, &err)), files[shard].bytes);
  EXPECT_EQ(err, "");
  (void)r;
}

TEST_F(HubTest, PrivateAndGatedReposExplainHowToGetAccess) {
  hub.set_private(kRepo, "tok");
  std::string e = error_of(kRepo);
  EXPECT_NE(e.find("private or gated"), std::string::npos) << e;
  EXPECT_NE(e.find("HF_TOKEN"), std::string::npos) << e;
  EXPECT_NE(e.find("/settings/tokens"), std::string::npos) << e;

  const std::string gated = "kvad-test/Gated";
  hub.add_commit(gated, tiny_model());
  hub.set_gated(gated, "granted");
  e = error_of(gated);
  EXPECT_NE(e.find("gated"), std::string::npos) << e;
  EXPECT_NE(e.find("request access at " + hub.endpoint() + "/" + gated), std::string::npos) << e;
  EXPECT_NE(e.find("HF_TOKEN is not set"), std::string::npos) << e;
  cfg.token = "not-granted";
  e = error_of(gated);
  EXPECT_NE(e.find("no access yet"), std::string::npos) << e;
  cfg.token = "granted";
  EXPECT_EQ(pull_ref(gated).files_downloaded, (int)kPulled.size());
}

TEST_F(HubTest, MissingRepoRevisionAndFileAreNamed) {
  std::string e = error_of("kvad-test/No-Such-Model");
  EXPECT_NE(e.find("kvad-test/No-Such-Model: no such model"), std::string::npos) << e;
  e = error_of(kRepo + "@nope");
  EXPECT_NE(e.find("revision 'nope' not found"), std::string::npos) << e;
  e = error_of(kRepo + ":missing.gguf");
  EXPECT_NE(e.find("no file or GGUF quantisation 'missing.gguf'"), std::string::npos) << e;
  EXPECT_NE(e.find("tiny-Q8_0.gguf"), std::string::npos) << e;  // lists what there is
  EXPECT_FALSE(exists(repo_dir() + "/refs"));
}

TEST_F(HubTest, EndpointThatIsNotAHub) {
  cfg.endpoint = hub.cdn();  // answers 404 to everything
  std::string e = error_of(kRepo);
  EXPECT_NE(e.find("is HF_ENDPOINT"), std::string::npos) << e;
  cfg.endpoint = "http://127.0.0.1:1";  // nothing listens
  e = error_of(kRepo);
  EXPECT_NE(e.find("cannot reach http://127.0.0.1:1"), std::string::npos) << e;
}

TEST_F(HubTest, SlowHubTimesOut) {
  hub.set_hub_delay_ms(3000);
  cfg.metadata_timeout_s = 0.5;
  auto t0 = std::chrono::steady_clock::now();
  std::string e = error_of(kRepo);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(e.find("did not answer within 0.5 s"), std::string::npos) << e;
  EXPECT_LT(s, 2.5);
}

TEST_F(HubTest, StalledDownloadTimesOutAndPlacesNothing) {
  const std::string shard = "model-00001-of-00002.safetensors";
  hub.trickle(sha(files[shard].bytes), 1000, 3000);  // 1 kB, then silence for 3 s
  cfg.download_timeout_s = 1;
  cfg.retries = 1;
  auto t0 = std::chrono::steady_clock::now();
  std::string e = error_of(kRepo);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(e.find("timed out"), std::string::npos) << e;
  EXPECT_LT(s, 8);
  EXPECT_FALSE(exists(blob(shard)));
  EXPECT_FALSE(exists(repo_dir() + "/snapshots/" + commit + "/" + shard));
}

TEST_F(HubTest, CancelStopsPromptlyAndLeavesOnlyThePartialFile) {
  const std::string shard = "model-00001-of-00002.safetensors";
  hub.trickle(sha(files[shard].bytes), 2000, 50);
  std::atomic<bool> cancel{false};
  cfg.cancel = &cancel;
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    cancel = true;
  });
  auto t0 = std::chrono::steady_clock::now();
  bool cancelled = false;
  try {
    pull_ref(kRepo);
  } catch (const Cancelled&) {
    cancelled = true;
  }
  stopper.join();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(cancelled);
  EXPECT_LT(s, 3);
  EXPECT_FALSE(exists(blob(shard)));
  EXPECT_FALSE(exists(repo_dir() + "/snapshots/" + commit + "/" + shard));
  EXPECT_TRUE(exists(blob(shard) + ".incomplete"));
}

TEST_F(HubTest, OfflineModeNeverTouchesTheNetwork) {
  cfg.offline = true;
  std::string e = error_of(kRepo);
  EXPECT_NE(e.find("HF_HUB_OFFLINE"), std::string::npos) << e;
  EXPECT_TRUE(hub.requests().empty());
  cfg.offline = false;
  pull_ref(kRepo);
  hub.clear_requests();
  cfg.offline = true;
  PullResult r = pull_ref(kRepo);
  EXPECT_TRUE(r.offline);
  EXPECT_EQ(r.commit, commit);
  EXPECT_TRUE(hub.requests().empty());
}

TEST_F(HubTest, OneFileByNameOrQuantisationTag) {
  PullResult r = pull_ref(kRepo + ":Q4_K_M");
  ASSERT_EQ(r.files, std::vector<std::string>{"gguf/tiny-Q4_K_M.gguf"});
  std::string err;
  kvad::test::HfLayoutReader rd{cache, kRepo};
  EXPECT_EQ(rd.check_file(commit, "gguf/tiny-Q4_K_M.gguf", true, &err), files["gguf/tiny-Q4_K_M.gguf"].bytes);
  EXPECT_EQ(err, "");  // the nested file links with ../../../blobs/
  EXPECT_FALSE(exists(r.snapshot_dir + "/config.json"));
  r = pull_ref(kRepo + ":tiny-Q8_0.gguf");
  EXPECT_EQ(r.files, std::vector<std::string>{"tiny-Q8_0.gguf"});
  r = pull_ref(kRepo + ":README.md");  // any file by its exact name
  EXPECT_EQ(r.files, std::vector<std::string>{"README.md"});
  auto c = find_cached(cache, parse_repo_ref(kRepo + ":q8_0"));
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->files, std::vector<std::string>{"tiny-Q8_0.gguf"});
  EXPECT_TRUE(c->missing.empty());
}

TEST_F(HubTest, RevisionsShareBlobsAndRecordRefs) {
  auto v2 = files;
  v2["config.json"].bytes = R"({"architectures":["Qwen2ForCausalLM"],"model_type":"qwen2","hidden_size":65})";
  std::string dev = hub.add_commit(kRepo, v2, "dev");
  pull_ref(kRepo);
  hub.clear_requests();
  PullResult r = pull_ref(kRepo + "@dev");
  EXPECT_EQ(r.commit, dev);
  EXPECT_EQ(hub.count("cdn", "GET"), 0);  // same shards: the blobs are already there
  EXPECT_EQ(r.files_downloaded, (int)kPulled.size());  // every link is new, only config.json's bytes are
  kvad::test::HfLayoutReader rd{cache, kRepo};
  std::string err;
  EXPECT_EQ(rd.commit_for("dev", &err), dev);
  EXPECT_EQ(rd.commit_for("main", &err), commit);
  // A commit hash as revision: no ref is written for it.
  pull_ref(kRepo + "@" + commit);
  EXPECT_FALSE(exists(repo_dir() + "/refs/" + commit));
  auto c = find_cached(cache, parse_repo_ref(kRepo + "@" + dev));
  ASSERT_TRUE(c.has_value());
  EXPECT_TRUE(c->missing.empty());
}

TEST_F(HubTest, ConcurrentPullsOfTheSameModel) {
  std::vector<std::thread> ts;
  std::atomic<int> ok{0};
  for (int i = 0; i < 3; i++)
    ts.emplace_back([&] {
      try {
        pull_ref(kRepo);
        ok++;
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(ok, 3);
  std::string err;
  kvad::test::HfLayoutReader rd{cache, kRepo};
  for (const std::string& p : kPulled) {
    EXPECT_EQ(rd.check_file(commit, p, files[p].lfs, &err), files[p].bytes);
    EXPECT_EQ(err, "") << p;
  }
  EXPECT_EQ(incomplete_files(), 0);
}

TEST_F(HubTest, UnwritableCacheIsAClearError) {
  std::string file = kvad::test::temp_dir("notadir") + "/file";
  std::ofstream(file) << "x";
  cfg.cache_dir = file + "/hub";  // a folder under a file: cannot be created, even by root
  std::string e = error_of(kRepo);
  EXPECT_NE(e.find("HF_HUB_CACHE"), std::string::npos) << e;
  EXPECT_NE(e.find(file), std::string::npos) << e;
}

TEST(HubDisk, NotEnoughSpaceIsNamed) {
  std::string dir = kvad::test::temp_dir("space");
  try {
    check_free_space(dir, UINT64_MAX / 2, "model.safetensors");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not enough disk space"), std::string::npos) << e.what();
  }
}

TEST(HubConfigEnv, ReadsTheHuggingFaceVariables) {
  std::string home = kvad::test::temp_dir("hfhome");
  setenv("HF_HOME", home.c_str(), 1);
  unsetenv("HF_HUB_CACHE");
  unsetenv("HUGGINGFACE_HUB_CACHE");
  unsetenv("HF_TOKEN");
  unsetenv("HUGGING_FACE_HUB_TOKEN");
  unsetenv("HF_TOKEN_PATH");
  setenv("HF_ENDPOINT", "http://127.0.0.1:9/", 1);
  setenv("HF_HUB_OFFLINE", "1", 1);
  setenv("HF_HUB_ETAG_TIMEOUT", "3", 1);
  std::ofstream(home + "/token") << "hf_from_file\n";
  HubConfig c = HubConfig::from_env();
  EXPECT_EQ(c.endpoint, "http://127.0.0.1:9");
  EXPECT_EQ(c.cache_dir, home + "/hub");
  EXPECT_EQ(c.token, "hf_from_file");
  EXPECT_TRUE(c.offline);
  EXPECT_EQ(c.metadata_timeout_s, 3);
  setenv("HF_TOKEN", "hf_env", 1);
  setenv("HF_HUB_CACHE", "/somewhere/hub", 1);
  setenv("HF_HUB_OFFLINE", "0", 1);
  c = HubConfig::from_env();
  EXPECT_EQ(c.token, "hf_env");
  EXPECT_EQ(c.cache_dir, "/somewhere/hub");
  EXPECT_FALSE(c.offline);
  setenv("HF_HUB_ETAG_TIMEOUT", "soon", 1);
  EXPECT_THROW(HubConfig::from_env(), Error);
  for (const char* v : {"HF_HOME", "HF_HUB_CACHE", "HF_TOKEN", "HF_ENDPOINT", "HF_HUB_OFFLINE", "HF_HUB_ETAG_TIMEOUT"})
    unsetenv(v);
}

}  // namespace
