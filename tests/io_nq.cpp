// The .nq cache's own guarantees (issue 9): each tensor's bytes carry a checksum verified before
// first use, so flipped bytes inside a tensor are an error naming it (the loader then rebuilds
// the cache: tests/models_nq_cache.cpp); a writer killed with SIGKILL mid-write leaves a temp
// file that the next open or write removes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/checksum.h"
#include "core/fs.h"
#include "core/error.h"
#include "io/nq.h"
#include "test_support.h"

using namespace kvad;
namespace fs = std::filesystem;

namespace {

const Json kStamp = {{"layout", 1}, {"tensors", {"a", "b"}}};

std::string write_cache(const std::string& dir, std::vector<float>& a, std::vector<float>& b) {
  a.resize(1000);
  b.resize(64);
  for (size_t i = 0; i < a.size(); i++) a[i] = (float)i * 0.5f;
  for (size_t i = 0; i < b.size(); i++) b[i] = -(float)i;
  NqWriter w;
  w.add("a", DType::F32, {1000}, (const uint8_t*)a.data(), a.size() * 4);
  w.add("b", DType::F32, {64}, (const uint8_t*)b.data(), b.size() * 4);
  std::string path = dir + "/m.q8.nq";
  w.write(path, kStamp);
  return path;
}

std::vector<fs::path> temps_of(const std::string& path) {
  std::vector<fs::path> out;
  for (auto& e : fs::directory_iterator(fs::path(path).parent_path()))
    if (e.path().filename().string().rfind(fs::path(path).filename().string() + ".tmp.", 0) == 0) out.push_back(e.path());
  return out;
}

}  // namespace

TEST(IoNq, Xxh64MatchesTheReference) {
  EXPECT_EQ(xxh64("", 0), 0xEF46DB3751D8E999ull);
  EXPECT_EQ(xxh64("abc", 3), 0x44BC2CF5AD770999ull);
  std::string s(1000, 'x');
  uint64_t h = xxh64(s.data(), s.size());
  for (size_t i : {0ul, 31ul, 32ul, 500ul, 999ul}) {  // every byte, in every part of the loop, counts
    std::string t = s;
    t[i] ^= 1;
    EXPECT_NE(xxh64(t.data(), t.size()), h) << i;
  }
}

TEST(IoNq, FlippedBytesInsideATensorAreDetected) {
  std::string dir = test::temp_dir("nq_flip");
  std::vector<float> a, b;
  std::string path = write_cache(dir, a, b);
  {
    NqCheckpoint ok(path, kStamp);
    TensorView t = ok.get("a");
    EXPECT_EQ(std::memcmp(t.data, a.data(), 4000), 0);
  }
  // Flip one byte in the middle of tensor a's data (it starts at byte 64).
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(64 + 2001);
    char c;
    f.read(&c, 1);
    c ^= 0x10;
    f.seekp(64 + 2001);
    f.write(&c, 1);
  }
  NqCheckpoint bad(path, kStamp);  // the header is intact: opening succeeds
  EXPECT_NO_THROW(bad.get("b"));   // the other tensor is fine
  try {
    bad.get("a");
    FAIL() << "a corrupt tensor was handed out";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("tensor 'a' fails its checksum"), std::string::npos) << msg;
  }
  EXPECT_THROW(NqCheckpoint(path, kStamp).verify_all(), Error);
  std::string bytes;
  {
    std::ifstream f(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  EXPECT_THROW(NqCheckpoint::validate((const uint8_t*)bytes.data(), bytes.size(), "x"), Error);
}

TEST(IoNq, CachesWithoutChecksumsAreRefused) {
  std::string dir = test::temp_dir("nq_v1");
  std::vector<float> a, b;
  std::string path = write_cache(dir, a, b);
  std::string bytes;
  {
    std::ifstream f(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  uint64_t hoff;
  std::memcpy(&hoff, bytes.data() + bytes.size() - 8, 8);
  Json h = Json::parse(bytes.substr(hoff, bytes.size() - 8 - hoff));
  auto rewrite = [&](const Json& header) {
    std::string out = bytes.substr(0, hoff) + header.dump();
    out.append((const char*)&hoff, 8);
    return out;
  };
  Json v1 = h;
  v1["kvad_nq"] = 1;
  for (auto& [k, e] : v1["tensors"].items()) e.erase("xxh64");
  std::string img = rewrite(v1);
  EXPECT_THROW(NqCheckpoint::validate((const uint8_t*)img.data(), img.size(), "v1"), Error);
  Json nosum = h;
  nosum["tensors"]["a"].erase("xxh64");
  img = rewrite(nosum);
  EXPECT_THROW(NqCheckpoint::validate((const uint8_t*)img.data(), img.size(), "nosum"), Error);
}

TEST(IoNq, AWriterKilledMidWriteLeavesNothingBehindNextRun) {
  std::string dir = test::temp_dir("nq_kill");
  std::vector<float> a, b;
  std::string path = write_cache(dir, a, b);  // a good cache from an earlier run
  std::vector<uint8_t> big(size_t(16) << 20, 0x5a);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // the writer: ~1 GB through the temp file, killed long before the end
    NqWriter w;
    for (int i = 0; i < 64; i++) w.add("t" + std::to_string(i), DType::F32, {int64_t(big.size() / 4)}, big.data(), big.size());
    try {
      w.write(path, kStamp);
    } catch (...) {
    }
    _exit(0);
  }
  auto t0 = std::chrono::steady_clock::now();
  bool mid = false;
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20)) {
    auto t = temps_of(path);
    std::error_code ec;
    if (!t.empty() && fs::file_size(t[0], ec) > (1u << 20)) {
      mid = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(mid) << "the writer never got going";
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "it finished before the kill";
  ASSERT_EQ(temps_of(path).size(), 1u) << "SIGKILL runs no destructor: the temp file stays";
  // The cache itself was never replaced: still the earlier, valid file.
  EXPECT_NO_THROW(NqCheckpoint(path, kStamp).verify_all());
  EXPECT_TRUE(temps_of(path).empty()) << "opening the cache removes the dead writer's temp";
  // A temp of a live process is left alone.
  std::string live = path + ".tmp." + std::to_string(getppid());
  std::ofstream(live) << "x";
  EXPECT_EQ(remove_stale_temp_files(path), 0u);
  EXPECT_TRUE(fs::exists(live));
  fs::remove(live);
}
