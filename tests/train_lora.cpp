// The trainer's LoRA side path (train/lora.h): its backward against central differences in
// float64 (grad_check.h), float against float64, the layout on GPT-2 and
// Llama shapes against the checkpoint's Hugging Face slices, PEFT's initialisation, the merge,
// and the PEFT folder written and read back. (That the engine runs a saved adapter as the merged
// model: tests/cli_lora.cpp.) KVAD_LORA_BENCH=1 also times the side path against the base linear.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include "core/rng.h"
#include "core/threads.h"
#include "io/safetensors.h"
#include "grad_check.h"
#include "test_support.h"
#include "train/checkpoint.h"
#include "train/layers.h"
#include "train/lora.h"
#include "random_values.h"

using namespace kvad;
using test::randn;
using namespace kvad::train;
namespace fs = std::filesystem;
using test::error_of;
using test::grad_check;

namespace {

// A piece in the middle of a wider site output: columns [out0, out0 + out) of rows of ldy.
struct Shape {
  int64_t rows, in, out, r, ldy, out0;
};

ModelShape gpt2_shape() {
  ModelShape s;
  s.arch = Arch::Gpt2, s.vocab = 40, s.layers = 3, s.dim = 48, s.heads = 4, s.context = 40;
  s.finalize();  // ffn 192
  return s;
}

ModelShape llama_shape() {
  ModelShape s = gpt2_shape();
  s.arch = Arch::Llama, s.heads = 6, s.kv_heads = 2, s.ffn = 0;  // q 48, k and v 16 each
  s.finalize();                                                  // ffn 128
  return s;
}

LoraConfig config(std::vector<std::string> targets, int64_t rank = 4, double alpha = 8) {
  LoraConfig c;
  c.rank = rank, c.alpha = alpha, c.targets = std::move(targets);
  return c;
}

int64_t site_weight(const LayerParams& w, LoraSite s) {
  return s == LoraSite::Qkv ? w.qkv_w : s == LoraSite::Proj ? w.proj_w : s == LoraSite::Fc ? w.fc_w : w.fc2_w;
}

}  // namespace

TEST(TrainLora, GradientsMatchCentralDifferences) {
  for (Shape s : {Shape{5, 7, 6, 1, 10, 3}, Shape{19, 12, 9, 4, 20, 11}, Shape{33, 9, 17, 4, 22, 0},
                  Shape{17, 16, 8, 3, 8, 0}}) {
    SCOPED_TRACE(fmt::format("rows {} in {} out {} r {} ldy {} out0 {}", s.rows, s.in, s.out, s.r, s.ldy, s.out0));
    Rng rng((uint64_t)(s.rows * 100 + s.r));
    auto x = randn<double>(rng, s.rows * s.in), A = randn<double>(rng, s.r * s.in), B = randn<double>(rng, s.out * s.r);
    auto y0 = randn<double>(rng, s.rows * s.ldy), g = randn<double>(rng, s.rows * s.ldy);
    const double scale = 1.7;
    std::vector<double> t((size_t)(s.rows * s.r));
    // L = Σ y · g over the whole site output (so dL/dy = g, columns outside the piece included).
    auto loss = [&] {
      std::vector<double> y = y0;
      lora_fwd(y.data() + s.out0, s.ldy, t.data(), x.data(), A.data(), B.data(), s.rows, s.in, s.out, s.r, scale);
      double sum = 0;
      for (size_t i = 0; i < y.size(); i++) sum += y[i] * g[i];
      return sum;
    };
    // The forward leaves the columns outside the piece alone.
    std::vector<double> y = y0;
    lora_fwd(y.data() + s.out0, s.ldy, t.data(), x.data(), A.data(), B.data(), s.rows, s.in, s.out, s.r, scale);
    for (int64_t i = 0; i < s.rows; i++)
      for (int64_t j = 0; j < s.ldy; j++)
        if (j < s.out0 || j >= s.out0 + s.out) {
          EXPECT_EQ(y[(size_t)(i * s.ldy + j)], y0[(size_t)(i * s.ldy + j)]);
        }
    // dA, dB, dt are written (NaN before: any read of them would show), dx is added to.
    auto dx0 = randn<double>(rng, s.rows * s.in);
    std::vector<double> dx = dx0, dA(A.size(), NAN), dB(B.size(), NAN), dt(t.size(), NAN);
    lora_bwd(dx.data(), dA.data(), dB.data(), dt.data(), g.data() + s.out0, s.ldy, x.data(), t.data(), A.data(),
             B.data(), s.rows, s.in, s.out, s.r, scale);
    for (size_t i = 0; i < dx.size(); i++) dx[i] -= dx0[i];
    grad_check("dx", x, dx, loss);
    grad_check("dA", A, dA, loss);
    grad_check("dB", B, dB, loss);
    // dx may be null (an input whose gradient is not needed).
    std::vector<double> dA2(A.size()), dB2(B.size());
    lora_bwd<double>(nullptr, dA2.data(), dB2.data(), dt.data(), g.data() + s.out0, s.ldy, x.data(), t.data(),
                     A.data(), B.data(), s.rows, s.in, s.out, s.r, scale);
    EXPECT_EQ(dA2, dA);
  }
}

// The float path (SIMD gemm, threads, the column split of dA) against the float64 reference, on
// shapes past the micro-tiles and the single-thread threshold. Each within 1e-5 of its tensor's
// largest value (f32 sums of a few hundred terms).
TEST(TrainLora, FloatMatchesDouble) {
  for (Shape s : {Shape{300, 130, 90, 16, 150, 37}, Shape{77, 40, 33, 5, 40, 7}, Shape{1, 20, 12, 1, 12, 0}}) {
    SCOPED_TRACE(fmt::format("rows {} in {} out {} r {}", s.rows, s.in, s.out, s.r));
    Rng rng(9);
    auto x = randn<double>(rng, s.rows * s.in), A = randn<double>(rng, s.r * s.in, 0.1),
         B = randn<double>(rng, s.out * s.r, 0.1), y = randn<double>(rng, s.rows * s.ldy),
         dy = randn<double>(rng, s.rows * s.ldy), dx = randn<double>(rng, s.rows * s.in);
    auto f = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
    auto xf = f(x), Af = f(A), Bf = f(B), yf = f(y), dyf = f(dy), dxf = f(dx);
    const int64_t nt = s.rows * s.r;
    std::vector<double> t((size_t)nt), dt((size_t)nt), dA(A.size()), dB(B.size());
    std::vector<float> tf((size_t)nt), dtf((size_t)nt), dAf(A.size()), dBf(B.size());
    lora_fwd(y.data() + s.out0, s.ldy, t.data(), x.data(), A.data(), B.data(), s.rows, s.in, s.out, s.r, 2.0);
    lora_fwd(yf.data() + s.out0, s.ldy, tf.data(), xf.data(), Af.data(), Bf.data(), s.rows, s.in, s.out, s.r, 2.0f);
    lora_bwd(dx.data(), dA.data(), dB.data(), dt.data(), dy.data() + s.out0, s.ldy, x.data(), t.data(), A.data(),
             B.data(), s.rows, s.in, s.out, s.r, 2.0);
    lora_bwd(dxf.data(), dAf.data(), dBf.data(), dtf.data(), dyf.data() + s.out0, s.ldy, xf.data(), tf.data(),
             Af.data(), Bf.data(), s.rows, s.in, s.out, s.r, 2.0f);
    auto close = [](const char* what, const std::vector<double>& want, const std::vector<float>& got) {
      double top = 0, err = 0;
      for (size_t i = 0; i < want.size(); i++) {
        top = std::max(top, std::fabs(want[i]));
        err = std::max(err, std::fabs(want[i] - got[i]));
      }
      EXPECT_LE(err, 1e-5 * top) << what;
    };
    close("y", y, yf), close("t", t, tf), close("dx", dx, dxf), close("dA", dA, dAf), close("dB", dB, dBf);
  }
}

TEST(TrainLora, LayoutGpt2) {
  const ModelShape s = gpt2_shape();
  const ParamLayout base = make_layout(s);
  const std::vector<HfTensor> hf = hf_tensors(s, base);
  auto hf_of = [&](const std::string& module) -> const HfTensor& {
    for (const HfTensor& t : hf)
      if (t.name == module + ".weight") return t;
    throw std::runtime_error("no " + module);
  };
  LoraLayout L = make_lora_layout(s, config({"c_attn", "c_proj", "c_fc"}));
  ASSERT_EQ(L.pieces.size(), 4u * 3);
  // Layer 1: c_attn covers all of qkv, c_proj both the attention's and the MLP's output.
  auto at = [&](LoraSite site) { return L.at(1, site); };
  ASSERT_EQ(at(LoraSite::Qkv).size(), 1u);
  const LoraPiece& qkv = at(LoraSite::Qkv)[0];
  EXPECT_EQ(qkv.module, "transformer.h.1.attn.c_attn");
  EXPECT_EQ(std::tuple(qkv.out0, qkv.out, qkv.in, qkv.ldy), std::tuple(0L, 144L, 48L, 144L));
  EXPECT_EQ(at(LoraSite::Proj)[0].module, "transformer.h.1.attn.c_proj");
  EXPECT_EQ(at(LoraSite::Fc)[0].module, "transformer.h.1.mlp.c_fc");
  EXPECT_EQ(std::tuple(at(LoraSite::Fc)[0].out, at(LoraSite::Fc)[0].in), std::tuple(192L, 48L));
  EXPECT_EQ(at(LoraSite::Fc2)[0].module, "transformer.h.1.mlp.c_proj");
  EXPECT_EQ(std::tuple(at(LoraSite::Fc2)[0].out, at(LoraSite::Fc2)[0].in), std::tuple(48L, 192L));
  // Every piece is exactly the checkpoint's slice of its site's weight.
  int64_t count = 0;
  for (const LoraPiece& p : L.pieces) {
    const HfTensor& t = hf_of(p.module);
    EXPECT_EQ(t.offset, site_weight(base.layers[(size_t)p.layer], p.site) + p.out0 * p.in) << p.module;
    EXPECT_EQ(std::tuple(t.rows, t.cols), std::tuple(p.out, p.in)) << p.module;
    count += 4 * (p.in + p.out);
  }
  EXPECT_EQ(L.total(), count);
  // "c_proj" alone: two pieces per layer; "attn.c_proj": the attention's only (PEFT's suffix rule).
  LoraLayout cp = make_lora_layout(s, config({"c_proj"}));
  ASSERT_EQ(cp.pieces.size(), 6u);
  EXPECT_EQ(cp.at(2, LoraSite::Proj).size(), 1u);
  EXPECT_EQ(cp.at(2, LoraSite::Fc2).size(), 1u);
  EXPECT_TRUE(cp.at(2, LoraSite::Qkv).empty());
  EXPECT_EQ(make_lora_layout(s, config({"attn.c_proj"})).pieces.size(), 3u);
  // all-linear: the four projections, not the embeddings.
  LoraLayout all = make_lora_layout(s, config({"all-linear"}));
  EXPECT_EQ(all.pieces.size(), 12u);
  EXPECT_EQ(all.total(), L.total());
  EXPECT_EQ(all.valid_targets, (std::vector<std::string>{"c_attn", "c_fc", "c_proj"}));
}

TEST(TrainLora, LayoutLlama) {
  const ModelShape s = llama_shape();
  const ParamLayout base = make_layout(s);
  LoraLayout L = make_lora_layout(s, config({"v_proj", "q_proj", "k_proj", "up_proj", "q_proj"}, 8));
  EXPECT_EQ(L.config.targets, (std::vector<std::string>{"v_proj", "q_proj", "k_proj", "up_proj"}));  // deduplicated
  ASSERT_EQ(L.pieces.size(), 4u * 3);
  auto qkv = L.at(2, LoraSite::Qkv);
  ASSERT_EQ(qkv.size(), 3u);
  EXPECT_EQ(qkv[0].module, "model.layers.2.self_attn.q_proj");
  EXPECT_EQ(qkv[1].module, "model.layers.2.self_attn.k_proj");
  EXPECT_EQ(qkv[2].module, "model.layers.2.self_attn.v_proj");
  EXPECT_EQ(std::tuple(qkv[0].out0, qkv[0].out), std::tuple(0L, 48L));
  EXPECT_EQ(std::tuple(qkv[1].out0, qkv[1].out), std::tuple(48L, 16L));
  EXPECT_EQ(std::tuple(qkv[2].out0, qkv[2].out, qkv[2].ldy), std::tuple(64L, 16L, 80L));
  auto fc = L.at(2, LoraSite::Fc);
  ASSERT_EQ(fc.size(), 1u);
  EXPECT_EQ(std::tuple(fc[0].module, fc[0].out0, fc[0].out, fc[0].ldy),
            std::tuple(std::string("model.layers.2.mlp.up_proj"), 128L, 128L, 256L));
  EXPECT_TRUE(L.at(2, LoraSite::Proj).empty());
  // The adapter's tensors: A then B per piece, back to back, named as PEFT names them.
  ASSERT_EQ(L.params.tensors.size(), 2 * L.pieces.size());
  int64_t next = 0;
  for (size_t i = 0; i < L.pieces.size(); i++) {
    const LoraPiece& p = L.pieces[i];
    const ParamInfo &a = L.params.tensors[2 * i], &b = L.params.tensors[2 * i + 1];
    EXPECT_EQ(a.name, p.module + ".lora_A.weight");
    EXPECT_EQ(b.name, p.module + ".lora_B.weight");
    EXPECT_EQ(a.shape, (std::vector<int64_t>{8, p.in}));
    EXPECT_EQ(b.shape, (std::vector<int64_t>{p.out, 8}));
    EXPECT_EQ(std::tuple(a.offset, b.offset), std::tuple(p.a, p.b));
    EXPECT_EQ(a.offset, next);
    next = b.offset + b.size;
  }
  EXPECT_EQ(L.total(), next);
  // all-linear: seven per layer, their slices the checkpoint's.
  LoraLayout all = make_lora_layout(s, config({"all-linear"}, 16));
  EXPECT_EQ(all.pieces.size(), 7u * 3);
  int64_t count = 0;
  for (const HfTensor& t : hf_tensors(s, base)) {
    if (t.cols == 0 || t.name.find("layers.") == std::string::npos) continue;
    bool found = false;
    for (const LoraPiece& p : all.pieces)
      if (p.module + ".weight" == t.name) {
        found = true;
        EXPECT_EQ(t.offset, site_weight(base.layers[(size_t)p.layer], p.site) + p.out0 * p.in) << t.name;
        EXPECT_EQ(std::tuple(t.rows, t.cols), std::tuple(p.out, p.in)) << t.name;
        count += 16 * (p.in + p.out);
      }
    EXPECT_TRUE(found) << t.name;
  }
  EXPECT_EQ(all.total(), count);
}

TEST(TrainLora, ConfigErrorsNameTheProblem) {
  const ModelShape l = llama_shape(), g = gpt2_shape();
  std::string e = error_of([&] { make_lora_layout(l, config({"q_proj", "qproj"})); });
  EXPECT_NE(e.find("'qproj'"), std::string::npos) << e;
  EXPECT_NE(e.find("down_proj, gate_proj, k_proj, o_proj, q_proj, up_proj, v_proj, or all-linear"), std::string::npos) << e;
  e = error_of([&] { make_lora_layout(g, config({"q_proj"})); });
  EXPECT_NE(e.find("c_attn, c_fc, c_proj, or all-linear"), std::string::npos) << e;
  e = error_of([&] { make_lora_layout(l, config({"lm_head"})); });
  EXPECT_NE(e.find("'lm_head' is not a projection"), std::string::npos) << e;
  // k_proj is 16 wide: rank 17 does not fit it; q_proj alone takes 17.
  e = error_of([&] { make_lora_layout(l, config({"q_proj", "k_proj"}, 17)); });
  EXPECT_NE(e.find("model.layers.0.self_attn.k_proj"), std::string::npos) << e;
  EXPECT_NE(e.find("= 16"), std::string::npos) << e;
  EXPECT_EQ(make_lora_layout(l, config({"q_proj"}, 17)).pieces.size(), 3u);
  EXPECT_NE(error_of([&] { make_lora_layout(l, config({"q_proj"}, 0)); }).find("rank = 0"), std::string::npos);
  EXPECT_NE(error_of([&] { make_lora_layout(l, config({"q_proj"}, 4, 0)); }).find("alpha = 0"), std::string::npos);
  EXPECT_NE(error_of([&] { make_lora_layout(l, config({"q_proj"}, 4, NAN)); }).find("alpha"), std::string::npos);
  EXPECT_NE(error_of([&] { make_lora_layout(l, config({})); }).find("no LoRA target"), std::string::npos);
  EXPECT_NE(error_of([&] { make_lora_layout(l, config({"all-linear", "q_proj"})); }).find("stands alone"),
            std::string::npos);
  LoraConfig c = config({"q_proj"}, 16, 32);
  EXPECT_DOUBLE_EQ(c.scale(), 2.0);
  c.rslora = true;
  EXPECT_DOUBLE_EQ(c.scale(), 8.0);
}

TEST(TrainLora, InitIsPeftsKaimingUniformAndZeroB) {
  const ModelShape s = llama_shape();
  LoraLayout L = make_lora_layout(s, config({"all-linear"}, 8));
  std::vector<float> a((size_t)L.total(), NAN), b((size_t)L.total());
  lora_init(a.data(), L, 5);
  lora_init(b.data(), L, 5);
  EXPECT_EQ(a, b);  // deterministic
  lora_init(b.data(), L, 6);
  EXPECT_NE(a, b);
  for (const LoraPiece& p : L.pieces) {
    const double bound = 1.0 / std::sqrt((double)p.in);
    double sum = 0, sq = 0, top = 0;
    const int64_t n = 8 * p.in;
    for (int64_t i = 0; i < n; i++) {
      double v = a[(size_t)(p.a + i)];
      ASSERT_LE(std::fabs(v), bound) << p.module;
      sum += v, sq += v * v, top = std::max(top, std::fabs(v));
    }
    for (int64_t i = 0; i < p.out * 8; i++) ASSERT_EQ(a[(size_t)(p.b + i)], 0.0f) << p.module;
    // U(-b, b): mean 0, sd b/sqrt(3); n >= 384 values, so within a few standard errors.
    const double mean = sum / (double)n, sd = std::sqrt(sq / (double)n - mean * mean);
    EXPECT_LT(std::fabs(mean), 0.15 * bound) << p.module;
    EXPECT_NEAR(sd, bound / std::sqrt(3.0), 0.1 * bound) << p.module;
    EXPECT_GT(top, 0.9 * bound) << p.module;
  }
}

// lora_merge adds s B A into the fused rows, so the base plus the side path equals the merged
// linear (float64), for every site of both architectures.
TEST(TrainLora, MergeEqualsTheSidePath) {
  for (const ModelShape& s : {gpt2_shape(), llama_shape()}) {
    SCOPED_TRACE(arch_name(s.arch));
    const ParamLayout base = make_layout(s);
    LoraLayout L = make_lora_layout(s, config({"all-linear"}, 3, 5));
    Rng rng(11);
    auto params = randn<double>(rng, base.total, 0.1), adapter = randn<double>(rng, L.total(), 0.1);
    std::vector<double> merged = params;
    lora_merge(merged.data(), base, L, adapter.data());
    const int64_t rows = 6;
    for (int k = 0; k < kLoraSites; k++) {
      const LoraSite site = (LoraSite)k;
      const int64_t l = 1, w = site_weight(base.layers[(size_t)l], site);
      auto pieces = L.at(l, site);
      ASSERT_FALSE(pieces.empty());
      const int64_t in = pieces[0].in, out = pieces[0].ldy;
      auto x = randn<double>(rng, rows * in);
      std::vector<double> y((size_t)(rows * out)), want(y.size()), t((size_t)(rows * 3));
      linear_fwd<double>(y.data(), x.data(), params.data() + w, nullptr, rows, in, out);
      for (const LoraPiece& p : pieces)
        lora_fwd(y.data() + p.out0, out, t.data(), x.data(), adapter.data() + p.a, adapter.data() + p.b, rows, in,
                 p.out, 3, L.scale());
      linear_fwd<double>(want.data(), x.data(), merged.data() + w, nullptr, rows, in, out);
      for (size_t i = 0; i < y.size(); i++) ASSERT_NEAR(y[i], want[i], 1e-12) << lora_site_name(site) << " " << i;
    }
    // Nothing outside the four sites' weights moved.
    for (const ParamInfo& p : base.tensors)
      if (p.shape.size() == 1 || p.name == "wte" || p.name == "wpe") {
        for (int64_t i = 0; i < p.size; i++) ASSERT_EQ(merged[(size_t)(p.offset + i)], params[(size_t)(p.offset + i)]);
      }
  }
}

TEST(TrainLora, PeftFolderRoundTrip) {
  const ModelShape s = gpt2_shape();
  LoraLayout L = make_lora_layout(s, config({"c_proj", "c_attn"}, 4, 16));
  Rng rng(12);
  auto adapter = randn<float>(rng, L.total()), m = randn<float>(rng, L.total()), v = randn<float>(rng, L.total());
  const std::string dir = join_path(test::temp_dir("train-lora-peft"), "adapter");
  AdapterSaveInfo info;
  info.base_model = "/models/base";
  info.kvad = {{"steps", 10}};
  info.adam_m = m.data(), info.adam_v = v.data();
  info.state = {{"step", 10}};
  save_peft_adapter(dir, L, adapter.data(), info);
  save_peft_adapter(dir, L, adapter.data(), info);  // over an existing folder: the exchange
  for (const auto& e : fs::directory_iterator(fs::path(dir).parent_path()))
    EXPECT_EQ(e.path().filename().string(), "adapter") << "a temporary was left";

  Json c = read_json_file(join_path(dir, "adapter_config.json"));
  EXPECT_EQ(c["peft_type"], "LORA");
  EXPECT_EQ(c["task_type"], "CAUSAL_LM");
  EXPECT_EQ(c["r"], 4);
  EXPECT_TRUE(c["lora_alpha"].is_number_integer());
  EXPECT_EQ(c["lora_alpha"], 16);
  EXPECT_EQ(c["use_rslora"], false);
  EXPECT_EQ(c["target_modules"], Json({"c_attn", "c_proj"}));
  EXPECT_EQ(c["fan_in_fan_out"], true);
  EXPECT_EQ(c["bias"], "none");
  EXPECT_EQ(c["lora_dropout"], 0.0);
  EXPECT_EQ(c["inference_mode"], true);
  EXPECT_EQ(c["base_model_name_or_path"], "/models/base");
  EXPECT_EQ(c["kvad"]["steps"], 10);
  SafetensorsFile st(join_path(dir, "adapter_model.safetensors"));
  ASSERT_EQ(st.tensors().size(), L.params.tensors.size());
  bool seen = false;
  for (const TensorView& t : st.tensors())
    if (t.name == "base_model.model.transformer.h.2.mlp.c_proj.lora_A.weight") {
      seen = true;
      EXPECT_EQ(t.dtype, DType::F32);
      EXPECT_EQ(t.shape, (std::vector<int64_t>{4, 192}));
    }
  EXPECT_TRUE(seen);

  LoadedAdapter got = load_peft_adapter(dir, L);
  EXPECT_EQ(got.adapter, adapter);
  EXPECT_EQ(got.adam_m, m);
  EXPECT_EQ(got.adam_v, v);
  EXPECT_EQ(got.state["step"], 10);
  // The same modules named another way load too.
  EXPECT_NO_THROW(load_peft_adapter(dir, make_lora_layout(s, config({"attn.c_proj", "c_attn", "mlp.c_proj"}, 4, 16))));

  // Mismatches name the field or the module.
  auto load_err = [&](const LoraConfig& c2) { return error_of([&] { load_peft_adapter(dir, make_lora_layout(s, c2)); }); };
  std::string e = load_err(config({"c_proj", "c_attn"}, 8, 16));
  EXPECT_NE(e.find("r = 4, but this run trains rank 8"), std::string::npos) << e;
  e = load_err(config({"c_proj", "c_attn"}, 4, 32));
  EXPECT_NE(e.find("lora_alpha = 16"), std::string::npos) << e;
  e = load_err(config({"c_attn"}, 4, 16));
  EXPECT_NE(e.find("transformer.h.0.attn.c_proj, which this run's targets (c_attn) do not"), std::string::npos) << e;
  e = load_err(config({"all-linear"}, 4, 16));
  EXPECT_NE(e.find("this run adapts transformer.h.0.mlp.c_fc"), std::string::npos) << e;
  LoraConfig rs = config({"c_proj", "c_attn"}, 4, 16);
  rs.rslora = true;
  EXPECT_NE(load_err(rs).find("use_rslora"), std::string::npos);
  // A tensor missing, or of the wrong shape.
  const std::string st_path = join_path(dir, "adapter_model.safetensors");
  {
    SafetensorsFile old(st_path);
    std::vector<TensorToWrite> ts;
    for (const TensorView& t : old.tensors())
      if (t.name.find("h.1.attn.c_attn.lora_B") == std::string::npos)
        ts.push_back({t.name, t.dtype, t.shape, std::string((const char*)t.data, t.nbytes)});
    write_safetensors(st_path, ts);
  }
  e = error_of([&] { load_peft_adapter(dir, L); });
  EXPECT_NE(e.find("no tensor 'base_model.model.transformer.h.1.attn.c_attn.lora_B.weight'"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { load_peft_adapter(test::temp_dir("train-lora-empty"), L); }).find("no adapter_config.json"),
            std::string::npos);
}

// KVAD_LORA_BENCH=1: one call of the side path at Qwen2.5-0.5B's MLP widths (gate/up: in 896,
// out 4864; down: in 4864, out 896) for 2048 rows, against the base linear of the same site: its
// forward, and its backward as LoRA training runs it (dx only: the base is frozen) and in full.
TEST(TrainLora, SidePathCost) {
  if (!std::getenv("KVAD_LORA_BENCH")) GTEST_SKIP() << "set KVAD_LORA_BENCH=1 to time the side path";
  using Clock = std::chrono::steady_clock;
  auto best_ms = [](const std::function<void()>& f) {
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
      auto t0 = Clock::now();
      f();
      best = std::min(best, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    return best;
  };
  const int64_t rows = 2048;
  const int threads = pool().size();
  for (int nt : {1, threads})
    for (auto [in, out] : {std::pair<int64_t, int64_t>{896, 4864}, {4864, 896}})
      for (int64_t r : {8, 16, 64}) {
        set_threads(nt);
        Rng rng(1);
        auto x = randn<float>(rng, rows * in), w = randn<float>(rng, out * in, 0.02),
             A = randn<float>(rng, r * in, 0.03), B = randn<float>(rng, out * r, 0.03), dy = randn<float>(rng, rows * out);
        std::vector<float> y((size_t)(rows * out)), dx((size_t)(rows * in)), dw(w.size()), t((size_t)(rows * r)),
            dt(t.size()), dA(A.size()), dB(B.size());
        const double base_f = best_ms([&] { linear_fwd<float>(y.data(), x.data(), w.data(), nullptr, rows, in, out); });
        const double base_dx = best_ms([&] {
          linear_bwd<float>(dx.data(), nullptr, nullptr, dy.data(), x.data(), w.data(), rows, in, out);
        });
        const double base_b = best_ms([&] {
          linear_bwd<float>(dx.data(), dw.data(), nullptr, dy.data(), x.data(), w.data(), rows, in, out);
        });
        const double side_f = best_ms([&] {
          lora_fwd<float>(y.data(), out, t.data(), x.data(), A.data(), B.data(), rows, in, out, r, 2.0f);
        });
        const double side_b = best_ms([&] {
          lora_bwd<float>(dx.data(), dA.data(), dB.data(), dt.data(), dy.data(), out, x.data(), t.data(), A.data(),
                          B.data(), rows, in, out, r, 2.0f);
        });
        const double macs = 100.0 * (double)r * (double)(in + out) / ((double)in * (double)out);
        std::string line = fmt::format(
            "in {} out {} r {:2} ({} thr): base fwd {:6.1f} ms, dx {:6.1f}, dx+dW {:6.1f} | side fwd {:5.1f} ms "
            "({:4.1f}% of fwd), bwd {:5.1f} ({:4.1f}% of dx, {:4.1f}% of dx+dW) | step {:4.1f}% | MACs {:.1f}%",
            in, out, r, nt, base_f, base_dx, base_b, side_f, 100 * side_f / base_f, side_b, 100 * side_b / base_dx,
            100 * side_b / base_b, 100 * (side_f + side_b) / (base_f + base_dx), macs);
        std::printf("%s\n", line.c_str());
        RecordProperty(fmt::format("in{}_out{}_r{}_t{}", in, out, r, nt), line);
      }
  set_threads(threads);
}
