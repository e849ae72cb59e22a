// The quantised-weight cache: written on the first quantised load, used after, rebuilt (never
// used) when corrupt or stale, and it keeps the unread-tensor guard working.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "one_sequence.h"
#include "core/error.h"
#include "io/nq.h"
#include "io/safetensors.h"
#include "models/registry.h"
#include "models/synth.h"
#include "test_support.h"

using namespace kvad;
namespace fs = std::filesystem;

namespace {

std::string synth(const std::string& arch) {
  SynthOptions o;
  o.arch = arch;
  o.preset = "tiny";
  o.std = 0.1;
  o.out = test::temp_dir(arch);
  synthesize(o);
  return o.out;
}

std::vector<float> logits_of(const Model& m) {
  test::OneSequence st(m);
  std::vector<int32_t> toks = {5, 17, 300, 42, 7};
  std::vector<float> out(m.config().vocab_size * toks.size());
  st.forward(toks.data(), (int64_t)toks.size(), out.data(), true);
  return out;
}

}  // namespace

TEST(NqCache, WrittenOnceThenUsedWithIdenticalLogits) {
  for (std::string arch : {"qwen2", "gpt2", "llama"}) {
    for (WeightFormat f : {WeightFormat::Q8, WeightFormat::Q4}) {
      std::string dir = synth(arch);
      LoadOptions o;
      o.format = f;
      o.cache_file = test::temp_dir("cache") + "/m." + weight_format_name(f) + ".nq";
      LoadReport r1, r2;
      auto a = load_model_dir(dir, o, &r1);
      ASSERT_FALSE(r1.from_cache);
      ASSERT_TRUE(fs::exists(o.cache_file)) << r1.note;
      auto b = load_model_dir(dir, o, &r2);
      EXPECT_TRUE(r2.from_cache) << r2.note;
      EXPECT_EQ(logits_of(*a), logits_of(*b)) << arch << " " << weight_format_name(f);
      EXPECT_EQ(a->weight_bytes(), b->weight_bytes());
    }
  }
}

TEST(NqCache, CorruptOrStaleFilesAreRebuiltNeverUsed) {
  std::string dir = synth("qwen2");
  LoadOptions o;
  o.format = WeightFormat::Q8;
  o.cache_file = test::temp_dir("cache") + "/m.q8.nq";
  auto ref = logits_of(*load_model_dir(dir, o));
  // Truncated: detected, rebuilt, same model.
  fs::resize_file(o.cache_file, fs::file_size(o.cache_file) - 100);
  LoadReport r;
  auto m = load_model_dir(dir, o, &r);
  EXPECT_FALSE(r.from_cache);
  EXPECT_NE(r.note.find("cache rebuilt"), std::string::npos) << r.note;
  EXPECT_EQ(logits_of(*m), ref);
  EXPECT_TRUE(load_model_dir(dir, o, &r) && r.from_cache);
  // Garbage in the data section keeps the header valid but must not crash anything; a flipped
  // header byte is caught.
  {
    std::fstream f(o.cache_file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-20, std::ios::end);
    f.write("\x01\x02\x03", 3);
  }
  load_model_dir(dir, o, &r);
  EXPECT_FALSE(r.from_cache) << r.note;
  // The checkpoint changed (new mtime): the cache is stale.
  fs::last_write_time(dir + "/model.safetensors", fs::file_time_type::clock::now() + std::chrono::hours(1));
  load_model_dir(dir, o, &r);
  EXPECT_FALSE(r.from_cache);
  EXPECT_NE(r.note.find("different checkpoint"), std::string::npos) << r.note;
  // Another format has its own file; f32 is never cached.
  LoadOptions f32 = o;
  f32.format = WeightFormat::F32;
  f32.cache_file = test::temp_dir("cache") + "/m.f32.nq";
  load_model_dir(dir, f32, &r);
  EXPECT_FALSE(fs::exists(f32.cache_file));
}

TEST(NqCache, FlippedBytesInsideATensorAreReportedAndRebuilt) {
  std::string dir = synth("llama");
  LoadOptions o;
  o.format = WeightFormat::Q4;
  o.cache_file = test::temp_dir("cache") + "/m.q4.nq";
  auto ref = logits_of(*load_model_dir(dir, o));
  // Flip bytes well inside the data section (tensors start at byte 64): the header is intact, so
  // only the checksums can tell.
  {
    std::fstream f(o.cache_file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(64 + 1000);
    f.write("\xde\xad\xbe\xef", 4);
  }
  LoadReport r;
  auto m = load_model_dir(dir, o, &r);
  EXPECT_FALSE(r.from_cache);
  EXPECT_NE(r.note.find("cache rebuilt"), std::string::npos) << r.note;
  EXPECT_NE(r.note.find("fails its checksum"), std::string::npos) << r.note;
  EXPECT_EQ(logits_of(*m), ref);
  LoadReport again;
  load_model_dir(dir, o, &again);
  EXPECT_TRUE(again.from_cache) << again.note;
}

TEST(NqCache, StampedTensorListKeepsTheGuard) {
  // A cache file whose stamp lists a tensor the model never reads: the guard must name it, as it
  // would for the checkpoint itself.
  std::string path = test::temp_dir("nq") + "/x.nq";
  NqWriter w;
  float v[2] = {1, 2};
  w.add("a", DType::F32, {2}, (const uint8_t*)v, 8);
  Json stamp = {{"tensors", {"a", "b.extra"}}};
  w.write(path, stamp);
  NqCheckpoint ck(path, stamp);
  ck.get("a", {2});
  try {
    ck.check_all_read({});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("b.extra"), std::string::npos);
  }
  // Asking for a stamped tensor the cache lacks is a miss (rebuild), not a silently absent weight.
  EXPECT_THROW(ck.has("b.extra"), NqStale);
  EXPECT_THROW(NqCheckpoint(path, Json{{"tensors", {"a"}}}), NqStale);
}

// LoadOptions::on_progress (the CLI's "loading ... 152 of 339 tensors" line): every tensor of a
// load that reads the checkpoint reported once, in order, up to the checkpoint's count; a load
// from the cache reads no checkpoint and reports nothing.
TEST(NqCache, AQuantisingLoadReportsItsProgressAndACachedOneNone) {
  const std::string dir = synth("llama");
  LoadOptions o;
  o.format = WeightFormat::Q8;
  o.cache_file = test::temp_dir("cache-progress") + "/m.q8.nq";
  std::vector<std::pair<int64_t, int64_t>> calls;
  o.on_progress = [&](int64_t done, int64_t total) { calls.push_back({done, total}); };
  LoadReport r;
  load_model_dir(dir, o, &r);
  ASSERT_FALSE(r.from_cache);
  const int64_t tensors = (int64_t)SafetensorsCheckpoint(dir).names().size();
  ASSERT_EQ((int64_t)calls.size(), tensors);  // the tiny llama stores no tensor kvad skips
  for (size_t i = 0; i < calls.size(); i++) EXPECT_EQ(calls[i], std::make_pair((int64_t)i + 1, tensors));
  calls.clear();
  load_model_dir(dir, o, &r);
  ASSERT_TRUE(r.from_cache);
  EXPECT_TRUE(calls.empty());
}
