#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "core/error.h"
#include "core/fs.h"
#include "io/safetensors.h"
#include "test_support.h"

using namespace kvad;

namespace {

std::string make_file(const std::string& header, const std::string& data) {
  uint64_t n = header.size();
  return std::string((const char*)&n, 8) + header + data;
}

std::vector<TensorView> parse(const std::string& bytes) {
  return SafetensorsFile::parse((const uint8_t*)bytes.data(), bytes.size(), "test.safetensors");
}

std::string safetensors_error_of(const std::string& bytes) {
  try {
    parse(bytes);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Safetensors, ParsesValidFile) {
  std::string data(24, '\0');
  float vals[2] = {1.5f, -2.0f};
  std::memcpy(&data[0], vals, 8);
  // The views point into the bytes, which must outlive them.
  std::string bytes = make_file(
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"BF16","shape":[2,4],"data_offsets":[8,24]}})",
      data);
  auto t = parse(bytes);
  ASSERT_EQ(t.size(), 2u);
  const TensorView& a = t[0].name == "a" ? t[0] : t[1];
  EXPECT_EQ(a.shape, std::vector<int64_t>{2});
  float got;
  std::memcpy(&got, a.data + 4, 4);
  EXPECT_EQ(got, -2.0f);
}

TEST(Safetensors, ReadsFloat8E4M3OneByteAValue) {
  // DeepSeek-V3's FP8 checkpoints: "F8_E4M3" (torch.float8_e4m3fn), decoded by models/weight_source.
  const std::string bytes = make_file(R"({"w":{"dtype":"F8_E4M3","shape":[2,3],"data_offsets":[0,6]}})",
                                      std::string("\x38\x7e\x01", 3) + "abc");
  auto t = parse(bytes);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].dtype, DType::F8_E4M3);
  EXPECT_EQ(t[0].nbytes, 6u);
  EXPECT_EQ(t[0].data[1], 0x7e);
  EXPECT_NE(safetensors_error_of(make_file(R"({"w":{"dtype":"F8_E4M3","shape":[2,3],"data_offsets":[0,5]}})", "12345"))
                .find("needs 6 bytes"),
            std::string::npos);
  // The other FP8 layout is not read: named, not mistaken for e4m3.
  EXPECT_NE(safetensors_error_of(make_file(R"({"w":{"dtype":"F8_E5M2","shape":[2],"data_offsets":[0,2]}})", "ab"))
                .find("unknown dtype 'F8_E5M2'"),
            std::string::npos);
}

TEST(Safetensors, RejectsBadFilesWithClearErrors) {
  std::string ok_entry = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  EXPECT_NE(safetensors_error_of("abc").find("not a safetensors file"), std::string::npos);
  {
    std::string f = make_file("{" + ok_entry + "}", std::string(8, '\0'));
    uint64_t huge = 1000000;
    std::memcpy(&f[0], &huge, 8);
    EXPECT_NE(safetensors_error_of(f).find("runs past the end"), std::string::npos);
  }
  EXPECT_NE(safetensors_error_of(make_file("{not json", "")).find("invalid JSON"), std::string::npos);
  EXPECT_NE(safetensors_error_of(make_file("{" + ok_entry + "}", std::string(4, '\0'))).find("out of bounds"), std::string::npos);
  EXPECT_NE(safetensors_error_of(make_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0')))
                .find("needs 12 bytes"),
            std::string::npos);
  EXPECT_NE(safetensors_error_of(make_file(R"({"a":{"dtype":"Q9","shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0')))
                .find("unknown dtype 'Q9'"),
            std::string::npos);
  EXPECT_NE(safetensors_error_of(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                               R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                               std::string(12, '\0')))
                .find("overlap"),
            std::string::npos);
  EXPECT_NE(safetensors_error_of(make_file(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,8]}})", std::string(8, '\0')))
                .find("non-negative"),
            std::string::npos);
  EXPECT_NE(safetensors_error_of(make_file(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
                               std::string(8, '\0')))
                .find("overflow"),
            std::string::npos);
  EXPECT_NE(safetensors_error_of(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", std::string(8, '\0')))
                .find("out of bounds"),
            std::string::npos);
}

TEST(Safetensors, WriteThenReadRoundTrips) {
  std::string dir = test::temp_dir("st");
  std::vector<TensorToWrite> ts = {{"x", DType::F32, {2, 2}, std::string(16, '\1')},
                                   {"y", DType::BF16, {3}, std::string(6, '\2')}};
  write_safetensors(dir + "/model.safetensors", ts);
  SafetensorsCheckpoint ck(dir);
  EXPECT_EQ(ck.names(), (std::vector<std::string>{"x", "y"}));
  TensorView y = ck.get("y", {3});
  EXPECT_EQ(y.dtype, DType::BF16);
  EXPECT_EQ(y.data[0], 2);
}

// release(): a tensor's pages leave the process's resident memory (a converted image model does not
// count twice) and read back with the same bytes (the mapping is the file's, never zeroed).
static long resident_pages() {
  long size = 0, resident = 0;
  std::ifstream("/proc/self/statm") >> size >> resident;
  return resident;
}

TEST(Checkpoint, ReleasedPagesLeaveMemoryAndReadBackTheSame) {
  std::string dir = test::temp_dir("release");
  const size_t n = 16u << 20;  // 16 MiB
  std::string bytes(n, '\0');
  for (size_t i = 0; i < n; i++) bytes[i] = (char)(i * 131 % 251);
  write_safetensors(dir + "/model.safetensors", {{"w", DType::F32, {(int64_t)n / 4}, bytes}});
  SafetensorsCheckpoint ck(dir);
  TensorView t = ck.get("w");
  long sum = 0;
  for (size_t i = 0; i < n; i += 4096) sum += t.data[i];  // touch every page
  const long before = resident_pages();
  ck.release(t);
  const long after = resident_pages();
  EXPECT_GT(before - after, (long)(n / 2 / 4096)) << "resident pages " << before << " -> " << after << " (sum " << sum << ")";
  EXPECT_EQ(std::memcmp(t.data, bytes.data(), n), 0);
}

TEST(Checkpoint, GuardNamesUnreadAndMissingTensors) {
  std::string dir = test::temp_dir("guard");
  write_safetensors(dir + "/model.safetensors", {{"used", DType::F32, {1}, std::string(4, '\0')},
                                                  {"extra.weight", DType::F32, {1}, std::string(4, '\0')},
                                                  {"rotary_emb.inv_freq", DType::F32, {1}, std::string(4, '\0')}});
  SafetensorsCheckpoint ck(dir);
  ck.get("used");
  try {
    ck.check_all_read({"rotary_emb.inv_freq"});
    FAIL() << "expected the unread-tensor guard to fire";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("extra.weight"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("inv_freq"), std::string::npos) << e.what();
  }
  try {
    ck.get("missing.weight");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing required tensor 'missing.weight'"), std::string::npos);
  }
  try {
    ck.get("used", {2});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has shape [1], expected [2]"), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, ShardedIndexIsFollowedAndChecked) {
  std::string dir = test::temp_dir("shards");
  write_safetensors(dir + "/a.safetensors", {{"t1", DType::F32, {1}, std::string(4, '\0')}});
  write_safetensors(dir + "/b.safetensors", {{"t2", DType::F32, {1}, std::string(4, '\0')}});
  atomic_write_file(dir + "/model.safetensors.index.json",
                    R"({"weight_map":{"t1":"a.safetensors","t2":"b.safetensors"}})");
  SafetensorsCheckpoint ck(dir);
  EXPECT_EQ(ck.names().size(), 2u);
  atomic_write_file(dir + "/model.safetensors.index.json", R"({"weight_map":{"t1":"a.safetensors","t3":"b.safetensors"}})");
  EXPECT_THROW(SafetensorsCheckpoint{dir}, Error);
  atomic_write_file(dir + "/model.safetensors.index.json", R"({"weight_map":{"t1":"../etc/passwd"}})");
  EXPECT_THROW(SafetensorsCheckpoint{dir}, Error);
}
