// Whole models on the Vulkan backend against the CPU backend (itself checked against the float64
// references): each architecture the GPU runs, each weight format, prefill and decode, many
// sequences in one batch over a shuffled paged cache, and the engine's own loop (continuous
// batching, forked choices that copy a shared block) giving the same tokens on both devices.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <random>

#include "core/json.h"
#include "golden_synth.h"
#include "gpu_device.h"
#include "resident_memory.h"
#include "models/lora.h"
#include "models/registry.h"
#include "models/synth.h"
#include "runtime/devices.h"
#include "runtime/engine.h"
#include "runtime/loader.h"
#include "runtime/nq_cache.h"
#include "runtime/session.h"
#include "synth_tiny.h"
#include "test_support.h"
#include "tiny_qwen2.h"

using namespace kvad;

namespace {

double rel_diff(const float* a, const float* b, int64_t n) {
  double scale = 0, d = 0;
  for (int64_t i = 0; i < n; i++) scale = std::max(scale, (double)std::fabs(b[i]));
  for (int64_t i = 0; i < n; i++) {
    if (!std::isfinite(a[i])) return INFINITY;
    d = std::max(d, (double)std::fabs(a[i] - b[i]));
  }
  return d / std::max(scale, 1e-30);
}

// Logits of a two-step batch on one backend: first every sequence's held prefix (no logits), then
// a mix of prefill chunks and single decode rows, all logits.
std::vector<float> batched_logits(const Model& m, Backend& ops, kernels::KvType kv_type = kernels::KvType::F32) {
  const int64_t bs = 3, V = m.config().vocab_size;
  const int64_t shape[][2] = {{0, 7}, {5, 1}, {11, 4}, {0, 1}, {8, 9}, {17, 1}};
  const int K = 6;
  const int64_t per_seq = 40 / bs, n_blocks = per_seq * K;
  std::vector<int32_t> perm((size_t)n_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(5));
  auto table = [&](int i) { return std::span<const int32_t>(perm.data() + i * per_seq, (size_t)per_seq); };
  std::mt19937 rng(11);
  std::vector<std::vector<int32_t>> toks(K);
  for (int i = 0; i < K; i++)
    for (int64_t t = 0; t < shape[i][0] + shape[i][1]; t++) toks[i].push_back((int32_t)(rng() % (uint32_t)V));
  MemorySpec spec = m.memory_spec();
  spec.kv_type = kv_type;
  auto mem = ops.make_memory(spec, n_blocks, bs);
  Batch held, step;
  for (int i = 0; i < K; i++)
    if (shape[i][0] > 0) held.add(i, std::span<const int32_t>(toks[i].data(), (size_t)shape[i][0]), 0, table(i), bs, Logits::None);
  m.forward(held, *mem, ops, nullptr);
  for (int i = 0; i < K; i++)
    step.add(i, std::span<const int32_t>(toks[i].data() + shape[i][0], (size_t)shape[i][1]), shape[i][0], table(i), bs,
             Logits::All);
  std::vector<float> out((size_t)(step.n_logits() * V));
  m.forward(step, *mem, ops, out.data());
  return out;
}

}  // namespace

TEST(GpuModels, EveryArchitectureAndFormatMatchesTheCpu) {
  KVAD_NEED_GPU(device);
  // Per format: the bound on max |gpu - cpu| / max |cpu| over a batch's logits. q8/q4 differ by the
  // CPU's int8 rounding of activations (the GPU multiplies f32 activations by the same codes).
  const std::pair<const char*, double> formats[] = {{"f32", 1e-4}, {"bf16", 1e-4}, {"q8", 0.05}, {"q4", 0.05}};
  for (std::string arch : {"llama", "qwen2", "qwen3", "gpt2"}) {
    const std::string dir = test::synth_tiny(arch, "gpu-v512", "tiny-v512");
    for (auto [fmt, tol] : formats) {
      SCOPED_TRACE(arch + " " + fmt);
      LoadOptions lo;
      lo.format = parse_weight_format(fmt);
      auto m = load_model_dir(dir, lo);
      auto cpu = make_backend("cpu", *m);
      const std::vector<float> c = batched_logits(*m, *cpu);
      for (const char* kernels : test::kKernelFamilies) {  // a GPU's products and lavapipe's
        SCOPED_TRACE(std::string("kernels ") + kernels);
        test::ScopedKernels scope(kernels);
        auto gpu = make_backend(device, *m);
        std::vector<float> g = batched_logits(*m, *gpu);
        ASSERT_EQ(c.size(), g.size());
        const int64_t V = m->config().vocab_size, rows = (int64_t)c.size() / V;
        for (int64_t r = 0; r < rows; r++)
          EXPECT_LE(rel_diff(&g[(size_t)(r * V)], &c[(size_t)(r * V)], V), tol) << "row " << r;
      }
    }
  }
}

// The default cache (--kv-type auto) is bf16 on both devices, and q8 runs on both: whole models'
// logits over a bf16 or q8 cache on the GPU against the same cache on the CPU, prefill and decode.
// Both round alike (nearest even; q8's amax / 127 codes), but a key or value the two devices
// compute a hair apart can round to neighbouring values: gpt2's bf16 differs by 1.6e-4 here (the
// rest by < 1e-6), where an f32 cache on one side differs by 2.8e-3 to 1.3e-2, so the bound sits
// between the two.
TEST(GpuModels, Bf16AndQ8CachesMatchTheCpus) {
  KVAD_NEED_GPU(device);
  for (std::string arch : {"llama", "gpt2"}) {
    auto m = load_model_dir(test::synth_tiny(arch, "gpu-v512", "tiny-v512"), LoadOptions{});
    auto cpu = make_backend("cpu", *m);
    auto gpu = make_backend(device, *m);
    for (kernels::KvType kv : {kernels::KvType::BF16, kernels::KvType::Q8}) {
      SCOPED_TRACE(arch + " " + kernels::kv_type_name(kv));
      const std::vector<float> c = batched_logits(*m, *cpu, kv), g = batched_logits(*m, *gpu, kv);
      ASSERT_EQ(c.size(), g.size());
      const int64_t V = m->config().vocab_size, rows = (int64_t)c.size() / V;
      for (int64_t r = 0; r < rows; r++)
        EXPECT_LE(rel_diff(&g[(size_t)(r * V)], &c[(size_t)(r * V)], V), 5e-4) << "row " << r;
    }
  }
}

// LoRA adapters on the device (the golden PEFT adapters of tests/models_lora.cpp, on their bases):
// sequences with no adapter, the adapter at 1, at 0.5, and at 1 again (neighbours sharing one side
// product) in one forward, against the CPU backend's side paths; an f32 base (f32 A and B) and a q8
// one (bf16 A and B). The adapter moves these logits by far more than the bound (checked below).
TEST(GpuModels, LoraAdaptersMatchTheCpu) {
  KVAD_NEED_GPU(device);
  const Json goldens = read_json_file(test::source_path("tests/golden/lora/lora.json"));
  for (std::string arch : {"llama", "gpt2"}) {  // gpt2: a fused c_attn, Conv1D's fan_in_fan_out
    SynthOptions o = test::golden_synth_options(goldens["synth"], arch, test::temp_dir("gpu-lora-" + arch));
    synthesize(o);
    for (auto [fmt, tol] : {std::pair{"f32", 1e-4}, std::pair{"q8", 0.05}}) {
      SCOPED_TRACE(arch + " " + fmt);
      LoadOptions lo;
      lo.format = parse_weight_format(fmt);
      auto m = load_model_dir(o.out, lo);
      auto adapter = load_lora(test::source_path("tests/golden/lora/" + arch), *m);
      const std::vector<std::vector<LoraUse>> uses = {{}, {{adapter.get(), 1}}, {{adapter.get(), 0.5f}}, {{adapter.get(), 1}}};
      const std::vector<std::vector<int32_t>> toks = {{5, 9, 300}, {5, 9, 300}, {400, 2, 3, 4, 5}, {11, 12}};
      const int64_t V = m->config().vocab_size, bs = 3, per_seq = 8;
      std::vector<int32_t> blocks((size_t)(per_seq * (int64_t)toks.size()));
      std::iota(blocks.begin(), blocks.end(), 0);
      std::vector<float> logits[2];
      for (int k = 0; k < 2; k++) {
        auto ops = make_backend(k ? std::string("cpu") : device, *m);
        auto mem = ops->make_memory(m->memory_spec(), per_seq * (int64_t)toks.size(), bs);
        Batch b;
        for (size_t i = 0; i < toks.size(); i++)
          b.add((int32_t)i, toks[i], 0, std::span<const int32_t>(blocks.data() + i * per_seq, per_seq), bs, Logits::All, uses[i]);
        logits[k].resize((size_t)(b.n_logits() * V));
        m->forward(b, *mem, *ops, logits[k].data());
      }
      const int64_t rows = (int64_t)logits[0].size() / V;
      for (int64_t r = 0; r < rows; r++)
        EXPECT_LE(rel_diff(&logits[0][(size_t)(r * V)], &logits[1][(size_t)(r * V)], V), tol) << "row " << r;
      // Sequences 0 and 1 are the same tokens without and with the adapter: it must show.
      for (int64_t r = 0; r < 3; r++)
        EXPECT_GT(rel_diff(&logits[1][(size_t)((3 + r) * V)], &logits[1][(size_t)(r * V)], V), 4 * tol) << "row " << r;
    }
  }
}

// The weights on the device are the model's matrices, each once: the tied embedding (Qwen2's tiny
// preset ties it) serves the lookup and the head from one copy, in f32 and in q8 alike.
TEST(GpuModels, ATiedEmbeddingIsOnTheDeviceOnce) {
  KVAD_NEED_GPU(device);
  const std::string dir = test::synth_tiny("qwen2", "gpu-tied");
  for (const char* fmt : {"f32", "q8"}) {
    SCOPED_TRACE(fmt);
    LoadOptions lo;
    lo.format = parse_weight_format(fmt);
    auto m = load_model_dir(dir, lo);
    const ModelConfig& c = m->config();
    ASSERT_TRUE(c.tie_embeddings);
    auto gpu = make_backend(device, *m);
    batched_logits(*m, *gpu);
    // [rows, cols] in the device's formats: f32 4 bytes a weight; q8 a byte a weight + an f16
    // scale per 32 (every width here is a multiple of 32).
    auto bytes = [&](int64_t rows, int64_t cols) {
      return std::string(fmt) == "f32" ? (size_t)(rows * cols) * 4 : (size_t)(rows * cols) + (size_t)(rows * cols / 32) * 2;
    };
    size_t expected = bytes(c.vocab_size, c.hidden);
    expected += (size_t)c.n_layers * (bytes(c.q_dim(), c.hidden) + 2 * bytes(c.kv_dim(), c.hidden) + bytes(c.hidden, c.q_dim()) +
                                      2 * bytes(c.intermediate, c.hidden) + bytes(c.hidden, c.intermediate));
    EXPECT_EQ(gpu->held_weight_bytes(), expected);
  }
}

// The GPU's q8 layout is cached in a file of its own (<model>.gpu-q8.nq, beside the CPU's
// <model>.q8.nq): written on the first load, read on the next with the same logits, rebuilt when a
// byte of it is corrupt or the model's files change; `kvad cache` lists and forgets both.
TEST(GpuModels, TheGpuWeightCacheIsItsOwnFile) {
  KVAD_NEED_GPU(device);
  const std::string home = test::temp_dir("gpu-cache-home");
  setenv("KVAD_HOME", home.c_str(), 1);
  const std::string dir = test::synth_tiny("llama", "gpu-cache");
  std::filesystem::copy_file(test::source_path("tests/fixtures/tokenizers/llama3/tokenizer.json"), dir + "/tokenizer.json");
  LoadOptions lo;
  lo.format = WeightFormat::Q8;
  LoadedModel m = load_model(dir, lo);
  auto run = [&](std::string* note) {
    EngineOptions o;
    o.device = device;
    set_gpu_weight_cache(o, m);
    EXPECT_NE(o.weight_cache.find(".gpu-q8.nq"), std::string::npos) << o.weight_cache;
    // The CLI's "copying the weights to the GPU" line hears of every matrix, in order, then of the end.
    std::vector<std::pair<int64_t, int64_t>> progress;
    o.on_weights_progress = [&](int64_t done, int64_t total) { progress.push_back({done, total}); };
    Engine e(*m.model, o);
    const int64_t n = (int64_t)m.model->matrices().size();
    EXPECT_EQ((int64_t)progress.size(), n + 1);
    for (size_t i = 0; i < progress.size(); i++) EXPECT_EQ(progress[i], std::make_pair((int64_t)i, n));
    *note = e.weights_note();
    return e.open_session()->forward({1, 5, 9, 200, 7});
  };
  std::string note;
  std::vector<float> first = run(&note);
  EXPECT_NE(note.find("repacked for the GPU, cached to"), std::string::npos) << note;
  std::vector<float> again = run(&note);
  EXPECT_NE(note.find("GPU weights from cache"), std::string::npos) << note;
  EXPECT_EQ(again, first);

  auto caches = list_nq_caches();
  ASSERT_EQ(caches.size(), 2u);
  const std::string gpu_file = caches[0].format == "gpu-q8" ? caches[0].file : caches[1].file;
  EXPECT_TRUE(caches[0].format == "gpu-q8" || caches[1].format == "gpu-q8");
  EXPECT_TRUE(caches[0].format == "q8" || caches[1].format == "q8");
  {  // one flipped byte in the middle of the codes
    std::fstream f(gpu_file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096);
    char c = 0;
    f.read(&c, 1);
    f.seekp(4096);
    c = (char)(c ^ 0x5a);
    f.write(&c, 1);
  }
  EXPECT_EQ(run(&note), first);
  EXPECT_NE(note.find("GPU cache rebuilt"), std::string::npos) << note;
  EXPECT_EQ(run(&note), first);
  EXPECT_NE(note.find("GPU weights from cache"), std::string::npos) << note;
  // The model's files changed (here only their time): the cache is a different model's.
  std::filesystem::last_write_time(dir + "/model.safetensors",
                                   std::filesystem::last_write_time(dir + "/model.safetensors") + std::chrono::hours(1));
  run(&note);
  EXPECT_NE(note.find("GPU cache rebuilt"), std::string::npos) << note;
  EXPECT_EQ(forget_nq_caches(std::filesystem::path(caches[0].model).string()).size(), 2u);
  unsetenv("KVAD_HOME");
}

// kvad run, chat and serve release a model's host copies once its engine holds every matrix on
// the GPU (release_host_weights_if_on_device): the heap of a load quantised on the way in and the
// mapped pages of weights used in place (a .nq cache, f32 as stored) leave the process, the GPU
// computes the same logits after, and a host product on the model fails naming why instead of
// reading freed memory.
TEST(GpuModels, ReleasedHostCopiesLeaveTheProcessAndTheGpuRunsOn) {
  KVAD_NEED_GPU(device);
  const std::string dir = test::synth_tiny("qwen2", "gpu-release");  // f32; the embedding is 39 MB
  const std::string cache = test::temp_dir("gpu-release-cache") + "/q8.nq";
  struct Case {
    const char* what;
    WeightFormat format;
    std::string cache_file;
    bool from_cache;
    std::string mapped;  // the file whose pages hold the host copy; "": the heap (RssAnon)
  };
  const Case cases[] = {{"q8, quantised at load", WeightFormat::Q8, cache, false, ""},
                        {"q8, from the .nq cache written by the load before", WeightFormat::Q8, cache, true, cache},
                        {"f32 as stored, used in place", WeightFormat::AsStored, "", false, dir + "/model.safetensors"}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    LoadOptions lo;
    lo.format = c.format;
    lo.cache_file = c.cache_file;
    LoadReport report;
    auto m = load_model_dir(dir, lo, &report);
    ASSERT_EQ(report.from_cache, c.from_cache) << report.note;
    EngineOptions o;
    o.device = device;
    o.ctx = 32;
    Engine e(*m, o);
    ASSERT_TRUE(e.weights_on_device());
    const std::vector<int32_t> prompt = {1, 5, 9, 200, 7};
    const std::vector<float> before = e.open_session()->forward(prompt);
    size_t host = 0;
    for (const NamedWeight& nw : m->matrices()) host += nw.weight->bytes();
    auto held_kb = [&] { return c.mapped.empty() ? test::status_kb("RssAnon") : test::resident_kb_of(c.mapped); };
    const long before_kb = held_kb();
    release_host_weights_if_on_device(*m, e);
    const long freed_kb = before_kb - held_kb();
    EXPECT_GE((double)freed_kb * 1024, 0.9 * (double)host)
        << (c.mapped.empty() ? "RssAnon" : c.mapped) << " fell by " << freed_kb << " kB of " << host / 1024 << " kB of weights";
    for (const NamedWeight& nw : m->matrices()) EXPECT_EQ(nw.weight->host_bytes(), nullptr) << nw.name;
    EXPECT_EQ(e.open_session()->forward(prompt), before);
    auto cpu = make_backend("cpu", *m);
    try {
      batched_logits(*m, *cpu);
      ADD_FAILURE() << "the CPU ran a model whose host weights were released";
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find("lives on the GPU only"), std::string::npos) << err.what();
    }
    try {  // a second GPU engine has nothing to copy
      Engine again(*m, o);
      ADD_FAILURE() << "a second engine started on a model whose host weights were released";
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find("a second engine needs the model loaded again"), std::string::npos)
          << err.what();
    }
  }
}

// EngineOptions::device_memory (--gpu-memory), on lavapipe as on a GPU: weights that do not fit are
// refused before any is copied; the KV cache takes what they leave but a working reserve; a context
// the user did not set is capped to fit (and the engine says so), one they set is refused with the
// largest that fits; the capped engine computes what an uncapped one does.
TEST(GpuModels, TheWeightsAndTheCacheMustFitTheMemoryGiven) {
  KVAD_NEED_GPU(device);
  auto m = load_model_dir(test::synth_tiny("qwen2", "gpu-memory"), LoadOptions{});
  const size_t weights = m->weight_bytes();
  MemorySpec spec = m->memory_spec();
  spec.kv_type = kernels::KvType::BF16;
  const size_t per_block = spec.bytes_per_token() * 16;
  EngineOptions o;
  o.device = device;
  o.kv_type = kernels::KvType::BF16;
  o.device_memory = weights / 2;
  try {
    Engine e(*m, o);
    ADD_FAILURE() << "weights twice the memory given were accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("the weights take"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("(--gpu-memory)"), std::string::npos) << err.what();
  }
  // Room for about 8 blocks of 16 positions past the weights and the reserve (a tenth), give or take
  // the buffers' alignment.
  o.device_memory = (size_t)((double)(weights + 8 * per_block) / 0.9) + 4096;
  Engine capped(*m, o);
  const int64_t ctx = capped.context_length();
  EXPECT_LT(ctx, m->context_length());
  EXPECT_GE(ctx, 16);
  EXPECT_LE(ctx, 10 * 16);
  EXPECT_EQ(ctx % 16, 0);
  EXPECT_NE(capped.weights_note().find("context capped at " + std::to_string(ctx) + " tokens"), std::string::npos)
      << capped.weights_note();
  const std::vector<int32_t> prompt = {1, 5, 9, 200, 7};
  EngineOptions plain = o;
  plain.device_memory = 0;
  plain.ctx = ctx;
  Engine uncapped(*m, plain);
  EXPECT_EQ(capped.open_session()->forward(prompt), uncapped.open_session()->forward(prompt));
  EngineOptions asked = o;
  asked.ctx = m->context_length();
  try {
    Engine e(*m, asked);
    ADD_FAILURE() << "a context the memory cannot hold was accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("lower --ctx (at most " + std::to_string(ctx) + " fits)"), std::string::npos)
        << err.what();
  }
}

TEST(GpuModels, KQuantWeightsMatchTheCpu) {
  KVAD_NEED_GPU(device);
  SynthOptions o;
  o.arch = "qwen3";
  o.preset = "tiny-kq";  // every width a multiple of 256
  o.dtype = DType::F32;
  o.std = 0.1;
  o.norm_jitter = 0.1;
  o.out = test::temp_dir("gpu-kq");
  synthesize(o);
  for (const char* fmt : {"q4k", "q6k"}) {
    SCOPED_TRACE(fmt);
    LoadOptions lo;
    lo.format = parse_weight_format(fmt);
    auto m = load_model_dir(o.out, lo);
    auto cpu = make_backend("cpu", *m), gpu = make_backend(device, *m);
    std::vector<float> c = batched_logits(*m, *cpu), g = batched_logits(*m, *gpu);
    const int64_t V = m->config().vocab_size;
    for (int64_t r = 0; r < (int64_t)c.size() / V; r++)
      EXPECT_LE(rel_diff(&g[(size_t)(r * V)], &c[(size_t)(r * V)], V), 0.05) << "row " << r;
  }
}

TEST(GpuModels, TheEngineGeneratesTheSameTokensOnBothDevices) {
  KVAD_NEED_GPU(device);
  const LoadedModel& lm = test::tiny_qwen2();
  const Model* m = lm.model.get();
  auto generate = [&](const std::string& dev) {
    EngineOptions eo;
    eo.device = dev;
    eo.max_running = 4;
    eo.block_size = 4;
    eo.ctx = 64;
    Engine engine(*m, eo);
    std::map<std::pair<int32_t, int32_t>, std::vector<int32_t>> out;  // (request, choice) -> tokens
    std::mt19937 rng(3);
    for (int i = 0; i < 3; i++) {
      GenerationRequest r;
      r.tokenizer = lm.tokenizer.get();
      for (int t = 0; t < 5 + 7 * i; t++) r.prompt.push_back((int32_t)(rng() % 1000));
      r.opts.max_tokens = 12;
      r.opts.sampling.temperature = 0;
      r.n = i == 1 ? 2 : 1;  // two choices share the prompt's blocks: the partial one is copied on write
      r.on_done = [&out, i](GenerateResult&& res, const std::string& err) {
        EXPECT_EQ(err, "");
        out[{i, res.choice}] = res.tokens;
      };
      engine.submit(std::move(r));
    }
    while (engine.has_work()) engine.step();
    return out;
  };
  auto cpu = generate("cpu"), gpu = generate(device);
  ASSERT_EQ(cpu.size(), 4u);
  EXPECT_EQ(gpu, cpu);
}

TEST(GpuModels, FamiliesTheGpuDoesNotRunAreRefusedByName) {
  KVAD_NEED_GPU(device);
  for (std::string arch : {"qwen3_moe", "qwen3_next"}) {
    auto m = load_model_dir(test::synth_tiny(arch, "gpu"), {});
    try {
      make_backend(device, *m);
      FAIL() << arch << " was accepted";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(m->config().architecture), std::string::npos) << msg;
      EXPECT_NE(msg.find("Qwen2ForCausalLM"), std::string::npos) << msg;  // says which do run
    }
  }
}
