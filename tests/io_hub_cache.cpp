// The HF cache layout without a network: names, validation of what the server says, scanning,
// removal plans, and reading a cache that huggingface_hub wrote.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "hf_layout_reader.h"
#include "io/hub.h"
#include "test_support.h"

using namespace kvad;
using namespace kvad::hf;
namespace fs = std::filesystem;
using test::error_of;

namespace {

TEST(HubNames, ParsesTheFormsUsersWrite) {
  RepoRef r = parse_repo_ref("Qwen/Qwen2.5-0.5B-Instruct");
  EXPECT_EQ(r.repo_id, "Qwen/Qwen2.5-0.5B-Instruct");
  EXPECT_EQ(r.revision, "main");
  EXPECT_FALSE(r.revision_given);
  EXPECT_EQ(r.file, "");
  r = parse_repo_ref("Qwen/Qwen3-0.6B@refs/pr/12");
  EXPECT_EQ(r.revision, "refs/pr/12");
  EXPECT_TRUE(r.revision_given);
  r = parse_repo_ref("city96/Qwen-Image-gguf:Q4_K_S");
  EXPECT_EQ(r.repo_id, "city96/Qwen-Image-gguf");
  EXPECT_EQ(r.file, "Q4_K_S");
  r = parse_repo_ref("a/b@v1.0:sub/model-Q8_0.gguf");
  EXPECT_EQ(r.revision, "v1.0");
  EXPECT_EQ(r.file, "sub/model-Q8_0.gguf");
  EXPECT_EQ(r.str(), "a/b@v1.0:sub/model-Q8_0.gguf");
}

TEST(HubNames, RejectsMalformedNamesSayingWhy) {
  EXPECT_NE(error_of([] { parse_repo_ref("gpt2"); }).find("ORG/NAME"), std::string::npos);
  EXPECT_NE(error_of([] { parse_repo_ref("a/b/c"); }).find("one '/'"), std::string::npos);
  EXPECT_NE(error_of([] { parse_repo_ref("/b"); }).find("is empty"), std::string::npos);
  EXPECT_NE(error_of([] { parse_repo_ref("a--x/b"); }).find("'--'"), std::string::npos);
  EXPECT_NE(error_of([] { parse_repo_ref("a/.b"); }).find("start or end"), std::string::npos);
  EXPECT_NE(error_of([] { parse_repo_ref("a/b c"); }).find("character ' '"), std::string::npos);
  EXPECT_NE(error_of([] { parse_repo_ref("a/b.git"); }).find(".git"), std::string::npos);
  EXPECT_NE(error_of([] { parse_repo_ref("a/" + std::string(97, 'x')); }).find("96"), std::string::npos);
  EXPECT_NE(error_of([] { parse_repo_ref("a/b@"); }).find("empty"), std::string::npos);
  EXPECT_NE(error_of([] { parse_repo_ref("a/b@../x"); }).find("not a valid"), std::string::npos);
  EXPECT_NE(error_of([] { parse_repo_ref("a/b:"); }).find("nothing after ':'"), std::string::npos);
  EXPECT_NE(error_of([] { parse_repo_ref("a/b:../etc/passwd"); }).find("not a plain relative path"), std::string::npos);
  EXPECT_NE(error_of([] { parse_repo_ref("a/b:/etc/passwd"); }).find("absolute"), std::string::npos);
}

TEST(HubNames, WhatLooksLikeAHubName) {
  EXPECT_TRUE(looks_like_repo_ref("Qwen/Qwen2.5-0.5B"));
  EXPECT_TRUE(looks_like_repo_ref("a/b@main"));
  EXPECT_FALSE(looks_like_repo_ref("gpt2"));
  EXPECT_FALSE(looks_like_repo_ref("/abs/path"));
  EXPECT_FALSE(looks_like_repo_ref("./rel/path"));
  EXPECT_FALSE(looks_like_repo_ref("name@x/y"));
  EXPECT_EQ(repo_folder_name("Qwen/Qwen2.5-0.5B"), "models--Qwen--Qwen2.5-0.5B");
  EXPECT_EQ(repo_id_from_folder("models--Qwen--Qwen2.5-0.5B").value_or(""), "Qwen/Qwen2.5-0.5B");
  EXPECT_FALSE(repo_id_from_folder("datasets--a--b").has_value());
  EXPECT_FALSE(repo_id_from_folder("models--gpt2").has_value());
}

std::string info_json(const std::string& rfilename, const std::string& extra = "") {
  return R"({"id":"a/b","sha":"0123456789abcdef0123456789abcdef01234567","siblings":[{"rfilename":")" + rfilename +
         R"(","size":3)" + extra + "}]}";
}

TEST(HubApi, ParsesTheListing) {
  RepoInfo i = parse_repo_info(
      R"({"id":"a/b","sha":"0123456789abcdef0123456789abcdef01234567","siblings":[
        {"rfilename":"config.json","size":10,"blobId":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"},
        {"rfilename":"model.safetensors","size":134,"blobId":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
         "lfs":{"sha256":"cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc","size":5000,"pointerSize":134}},
        {"rfilename":"onnx/model.onnx"}]})",
      "api");
  EXPECT_EQ(i.commit, "0123456789abcdef0123456789abcdef01234567");
  ASSERT_EQ(i.files.size(), 3u);
  EXPECT_EQ(*i.find("model.safetensors")->size, 5000u);  // the LFS size, not the pointer's
  EXPECT_EQ(i.find("model.safetensors")->lfs_sha256.substr(0, 4), "cccc");
  EXPECT_FALSE(i.find("onnx/model.onnx")->size.has_value());
}

TEST(HubApi, RejectsListingsThatWouldNamePathsOutsideTheCache) {
  EXPECT_NE(error_of([] { parse_repo_info(info_json("../../evil"), "api"); }).find("not a plain relative path"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_repo_info(info_json("/etc/passwd"), "api"); }).find("absolute"), std::string::npos);
  EXPECT_NE(error_of([] { parse_repo_info(info_json("a\\\\b"), "api"); }).find("backslash"), std::string::npos);
  EXPECT_NE(error_of([] { parse_repo_info(R"({"sha":"../x","siblings":[]})", "api"); }).find("40-hex"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_repo_info(info_json("x", R"(,"lfs":{"sha256":"../../x","size":1})"), "api"); })
                .find("64 hex"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_repo_info("not json", "api"); }).find("invalid JSON"), std::string::npos);
  EXPECT_NE(error_of([] { parse_repo_info(R"({"sha":"0123456789abcdef0123456789abcdef01234567"})", "api"); })
                .find("siblings"),
            std::string::npos);
  EXPECT_NE(error_of([] { validate_etag("../../../x", "f"); }).find("ETag"), std::string::npos);
  EXPECT_NE(error_of([] { parse_index_shards(R"({"weight_map":{"a":"../x.safetensors"}})", "idx"); })
                .find("not a plain relative path"),
            std::string::npos);
  EXPECT_EQ(parse_index_shards(R"({"weight_map":{"a":"s2","b":"s1","c":"s2"}})", "idx"),
            (std::vector<std::string>{"s1", "s2"}));
}

TEST(HubApi, MatchesFilesByNameOrQuantisationTag) {
  std::vector<std::string> paths = {"README.md", "model-Q4_K_M.gguf", "model-Q4_K_S.gguf", "model-Q8_0.gguf",
                                    "big/big-Q4_K_M-00001-of-00002.gguf", "big/big-Q4_K_M-00002-of-00002.gguf"};
  EXPECT_EQ(match_files(paths, "README.md", "r"), std::vector<std::string>{"README.md"});
  EXPECT_EQ(match_files(paths, "q8_0", "r"), std::vector<std::string>{"model-Q8_0.gguf"});
  EXPECT_EQ(match_files(paths, "Q4_K_S", "r"), std::vector<std::string>{"model-Q4_K_S.gguf"});
  // "Q4_K" is not "Q4_K_S": no partial tags.
  EXPECT_NE(error_of([&] { match_files(paths, "Q4_K", "r"); }).find("no file or GGUF quantisation"), std::string::npos);
  // Two different models match Q4_K_M: ambiguous, listed.
  EXPECT_NE(error_of([&] { match_files(paths, "Q4_K_M", "r"); }).find("matches several files"), std::string::npos);
  std::vector<std::string> split = {"big/big-Q4_K_M-00001-of-00002.gguf", "big/big-Q4_K_M-00002-of-00002.gguf"};
  EXPECT_EQ(match_files(split, "Q4_K_M", "r"), split);  // the parts of one split file
}

struct CacheTest : ::testing::Test {
  std::string cache = kvad::test::temp_dir("cache");
  // Writes a snapshot the way huggingface_hub does (relative links into blobs/, refs without newline).
  void put(const std::string& repo, const std::string& commit, const std::map<std::string, std::string>& files,
           const std::string& ref = "") {
    std::string dir = cache + "/" + repo_folder_name(repo);
    fs::create_directories(dir + "/blobs");
    for (auto& [p, bytes] : files) {
      std::string etag = kvad::test::hf_digest(bytes, bytes.size() > 100);
      std::ofstream(dir + "/blobs/" + etag, std::ios::binary) << bytes;
      std::string link = dir + "/snapshots/" + commit + "/" + p;
      fs::create_directories(fs::path(link).parent_path());
      std::string target;
      for (char c : p)
        if (c == '/') target += "../";
      fs::create_symlink(target + "../../blobs/" + etag, link);
    }
    if (!ref.empty()) {
      fs::create_directories(dir + "/refs");
      std::ofstream(dir + "/refs/" + ref) << commit;
    }
  }
};

const std::string kC1 = "1111111111111111111111111111111111111111";
const std::string kC2 = "2222222222222222222222222222222222222222";

TEST_F(CacheTest, FindsAModelPythonDownloaded) {
  std::string big(5000, 'w');
  put("org/m", kC1,
      {{"config.json", "{}"},
       {"tokenizer.json", "{}"},
       {"model.safetensors.index.json", R"({"weight_map":{"a":"w1.safetensors","b":"w2.safetensors"}})"},
       {"w1.safetensors", big},
       {"w2.safetensors", big + "2"}},
      "main");
  auto c = find_cached(cache, parse_repo_ref("org/m"));
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->commit, kC1);
  EXPECT_TRUE(c->missing.empty());
  EXPECT_EQ(c->dir, cache + "/models--org--m/snapshots/" + kC1);
  c = find_cached(cache, parse_repo_ref("org/m@" + kC1));  // a commit needs no ref
  ASSERT_TRUE(c.has_value());
  EXPECT_FALSE(find_cached(cache, parse_repo_ref("org/m@dev")).has_value());
  EXPECT_FALSE(find_cached(cache, parse_repo_ref("org/other")).has_value());
}

TEST_F(CacheTest, ReportsWhatAnIncompleteSnapshotLacks) {
  put("org/m", kC1,
      {{"config.json", "{}"}, {"model.safetensors.index.json", R"({"weight_map":{"a":"w1.safetensors","b":"w2.safetensors"}})"},
       {"w1.safetensors", std::string(500, 'x')}},
      "main");
  auto c = find_cached(cache, parse_repo_ref("org/m"));
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->missing, (std::vector<std::string>{"tokenizer.json", "w2.safetensors"}));
  // A link whose blob is gone is missing too.
  fs::remove(cache + "/models--org--m/blobs/" + kvad::test::hf_digest(std::string(500, 'x'), true));
  c = find_cached(cache, parse_repo_ref("org/m"));
  EXPECT_EQ(c->missing, (std::vector<std::string>{"tokenizer.json", "w1.safetensors", "w2.safetensors"}));
}

TEST_F(CacheTest, ScanAndRemovalPlans) {
  std::string shared(1000, 's');
  put("org/m", kC1, {{"config.json", "{\"v\":1}"}, {"model.safetensors", shared}}, "main");
  put("org/m", kC2, {{"config.json", "{\"v\":2}"}, {"model.safetensors", shared}}, "dev");
  auto repo = scan_repo(cache, "org/m");
  ASSERT_TRUE(repo.has_value());
  ASSERT_EQ(repo->snapshots.size(), 2u);
  for (auto& s : repo->snapshots) {
    EXPECT_TRUE(s.has("config.json"));
    EXPECT_TRUE(s.has("model.safetensors"));
    EXPECT_EQ(s.refs.size(), 1u);
  }
  EXPECT_EQ(scan_cache(cache).size(), 1u);

  // Removing dev frees only its config blob; the shared weights stay for main.
  RemovalPlan p = plan_removal(*repo, {kC2});
  EXPECT_FALSE(p.whole_repo);
  EXPECT_EQ(p.blobs, std::vector<std::string>{kvad::test::hf_digest("{\"v\":2}", false)});
  EXPECT_EQ(p.refs, std::vector<std::string>{"dev"});
  execute_removal(cache, p);
  auto c = find_cached(cache, parse_repo_ref("org/m"));
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->missing, std::vector<std::string>{"tokenizer.json"});  // the weights are still there
  EXPECT_FALSE(fs::exists(cache + "/models--org--m/refs/dev"));
  EXPECT_FALSE(fs::exists(cache + "/models--org--m/snapshots/" + kC2));

  // Removing the last snapshot removes the whole folder (and its lock folder).
  fs::create_directories(cache + "/.locks/models--org--m");
  repo = scan_repo(cache, "org/m");
  p = plan_removal(*repo, {kC1});
  EXPECT_TRUE(p.whole_repo);
  EXPECT_GT(p.bytes_freed, 0u);
  execute_removal(cache, p);
  EXPECT_FALSE(fs::exists(cache + "/models--org--m"));
  EXPECT_FALSE(fs::exists(cache + "/.locks/models--org--m"));
  EXPECT_TRUE(scan_cache(cache).empty());
}

TEST_F(CacheTest, KvadLinksAreTheOnesPythonMakes) {
  RepoCache rc(cache, "org/m");
  fs::create_directories(rc.blobs_dir());
  std::string bytes = "hello";
  std::string etag = kvad::test::hf_digest(bytes, false);
  std::ofstream(rc.blob_path(etag)) << bytes;
  rc.link(kC1, "sub/dir/file.txt", etag);
  rc.write_ref("main", kC1);
  rc.write_ref(kC1, kC1);  // a commit is its own name: no ref file
  EXPECT_EQ(fs::read_symlink(rc.file_path(kC1, "sub/dir/file.txt")).string(), "../../../../blobs/" + etag);
  kvad::test::HfLayoutReader rd{cache, "org/m"};
  std::string err;
  EXPECT_EQ(rd.commit_for("main", &err), kC1);
  EXPECT_EQ(rd.check_file(kC1, "sub/dir/file.txt", false, &err), bytes);
  EXPECT_EQ(err, "");
  EXPECT_FALSE(fs::exists(rc.ref_path(kC1)));
  EXPECT_EQ(kvad::test::hf_slurp(rc.ref_path("main")), kC1);  // no newline
}

}  // namespace
