// The CPU backend: every call is one of kvad's kernels (runtime-dispatched AVX-512 / AVX2 /
// scalar) over host memory. Shapes are checked on every call: a mistake in an architecture file
// is an error naming the operation, not a wrong answer.
#include <cmath>
#include <algorithm>
#include <cstring>

#include "backend/arena.h"
#include "backend/backend.h"
#include "backend/checks.h"
#include "core/error.h"
#include "core/threads.h"
#include "kernels/kqmatmul.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"

namespace kvad {

namespace {

void need(bool ok, const char* op, const Tensor& a, const char* what) { need_shape(ok, "cpu", op, a, what); }

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }

  void begin_forward(const Batch& batch) override {
    arena_.reset();
    batch_ = &batch;
    // A verifying forward's rows must equal one-row forwards bit for bit: K-quant products keep
    // their row kernels for it (kernels/kqmatmul.h).
    bool rowwise = false;
    for (const kernels::AttentionSpan& s : batch.attention_spans()) rowwise = rowwise || s.rowwise;
    kernels::set_kq_tiles_allowed(!rowwise);
  }
  Tensor tensor(int64_t rows, int64_t cols) override {
    return Tensor::wrap(arena_.floats((size_t)(rows * cols)), rows, cols);
  }
  std::unique_ptr<Memory> make_memory(const MemorySpec& spec, int64_t n_blocks, int64_t block_size,
                                      int64_t n_states) override {
    return std::make_unique<Memory>(spec, n_blocks, block_size, n_states);
  }

  void embed(const Weight& table, const Batch& batch, Tensor out) override {
    need(out.rows == batch.size() && out.cols == table.cols(), "embed", out, "shape differs from [rows, table width]");
    for (int64_t r = 0; r < out.rows; r++) {  // checked first: a failure is not thrown on a pool thread
      int32_t id = batch.rows()[(size_t)r].token;
      if (id < 0 || id >= table.rows())
        fail("token id {} is out of range for this model's vocabulary of {}", id, table.rows());
    }
    kernels::rows_on_pool(out.rows, out.cols, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; r++) table.row(batch.rows()[(size_t)r].token, out.data + r * out.stride);
    });
  }

  void add_position_rows(Tensor x, const std::vector<float>& table, const Batch& batch) override {
    int64_t positions = (int64_t)table.size() / x.cols;
    for (int64_t r = 0; r < x.rows; r++) {  // checked first: a failure is not thrown on a pool thread
      int64_t p = batch.rows()[(size_t)r].pos;
      if (p < 0 || p >= positions) fail("position {} is beyond the model's {} positions", p, positions);
    }
    kernels::rows_on_pool(x.rows, x.cols, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; r++)
        kernels::add(x.data + r * x.stride, table.data() + batch.rows()[(size_t)r].pos * x.cols, x.cols);
    });
  }

  const float* dense_input(Tensor x) {  // the matmul kernels read [n, cols] contiguous
    if (x.contiguous()) return x.data;
    Tensor c = tensor(x.rows, x.cols);
    for (int64_t r = 0; r < x.rows; r++) std::memcpy(c.data + r * c.cols, x.data + r * x.stride, (size_t)x.cols * 4);
    return c.data;
  }

  void linear(const Weight& w, Tensor x, Tensor y) override {
    need(x.cols == w.cols(), "linear", x, "input width differs from the weight's columns");
    need(y.rows == x.rows && y.cols == w.rows() && y.contiguous(), "linear", y, "output is not [n, weight rows] contiguous");
    const float* in = dense_input(x);
    const Weight* ws[1] = {&w};
    if (fused_loras(ws, 1, in, &y)) return;
    w.matmul(in, x.rows, y.data);
    add_loras(w, in, y);
  }

  void linear_group(Tensor x, std::initializer_list<std::pair<const Weight*, Tensor>> outs) override {
    const float* in = dense_input(x);
    std::pair<const Weight*, float*> o[4];
    size_t n = 0;
    for (const auto& [w, y] : outs) {
      need(x.cols == w->cols(), "linear_group", x, "input width differs from a weight's columns");
      need(y.rows == x.rows && y.cols == w->rows() && y.contiguous(), "linear_group", y, "output is not [n, weight rows]");
      if (n == 4) fail("cpu backend linear_group: at most 4 weights");
      o[n++] = {w, y.data};
    }
    {
      const Weight* ws[4] = {};  // (n of them set: GCC cannot tell, and warned)
      Tensor ys[4];
      size_t i = 0;
      for (const auto& [w, y] : outs) ws[i] = w, ys[i++] = y;
      if (fused_loras(ws, n, in, ys)) return;
    }
    if (n == 2) Weight::matmul_group(in, x.rows, {o[0], o[1]});
    else if (n == 3) Weight::matmul_group(in, x.rows, {o[0], o[1], o[2]});
    else
      for (size_t i = 0; i < n; i++) o[i].first->matmul(in, x.rows, o[i].second);
    for (const auto& [w, y] : outs) add_loras(*w, in, y);
  }

  void add_bias(Tensor y, const std::vector<float>& b) override {
    need((int64_t)b.size() == y.cols, "add_bias", y, "bias length differs from the width");
    kernels::rows_on_pool(y.rows, y.cols, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; r++) kernels::add(y.data + r * y.stride, b.data(), y.cols);
    });
  }

  void add(Tensor y, Tensor x) override {
    need(x.rows == y.rows && x.cols == y.cols, "add", x, "shapes differ");
    if (x.contiguous() && y.contiguous()) return kernels::add(y.data, x.data, y.rows * y.cols);
    kernels::rows_on_pool(y.rows, y.cols, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; r++) kernels::add(y.data + r * y.stride, x.data + r * x.stride, y.cols);
    });
  }

  void rmsnorm(Tensor x, const std::vector<float>& w, float eps, Tensor out) override {
    need((int64_t)w.size() == x.cols && out.rows == x.rows && out.cols == x.cols, "rmsnorm", x, "weight/output shape");
    kernels::rmsnorm_rows(x.data, x.stride, w.data(), eps, x.rows, x.cols, out.data, out.stride);
  }

  void layernorm(Tensor x, const std::vector<float>& w, const std::vector<float>& b, float eps, Tensor out) override {
    need((int64_t)w.size() == x.cols && (int64_t)b.size() == x.cols && out.rows == x.rows && out.cols == x.cols,
         "layernorm", x, "weight/bias/output shape");
    kernels::rows_on_pool(x.rows, x.cols, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; r++)
        kernels::layernorm(x.data + r * x.stride, w.data(), b.data(), eps, x.cols, out.data + r * out.stride);
    });
  }

  void silu_mul(Tensor gate, Tensor up) override {
    need(gate.contiguous() && up.contiguous() && gate.rows == up.rows && gate.cols == up.cols, "silu_mul", gate,
         "gate and up must be the same contiguous shape");
    kernels::silu_mul(gate.data, up.data, gate.rows * gate.cols);
  }

  void sigmoid_gate(Tensor y, Tensor gate) override {
    need(gate.rows == y.rows && (gate.cols == y.cols || gate.cols == 1), "sigmoid_gate", gate,
         "gate is not y's shape or one column");
    kernels::rows_on_pool(y.rows, y.cols, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; r++) {
        float* yr = y.data + r * y.stride;
        const float* g = gate.data + r * gate.stride;
        if (gate.cols == 1) {
          const float s = 1.0f / (1.0f + std::exp(-g[0]));
          for (int64_t c = 0; c < y.cols; c++) yr[c] *= s;
        } else {
          for (int64_t c = 0; c < y.cols; c++) yr[c] *= 1.0f / (1.0f + std::exp(-g[c]));
        }
      }
    });
  }

  void gelu_tanh(Tensor x) override {
    need(x.contiguous(), "gelu_tanh", x, "not contiguous");
    kernels::gelu_tanh(x.data, x.rows * x.cols);
  }

  void rope_table(const Batch& batch, const std::vector<double>& inv_freq, Tensor table, double magnitude) override {
    const int64_t half = (int64_t)inv_freq.size();
    need(table.rows == batch.size() && table.cols == 2 * half, "rope_table", table, "not [rows, 2 * frequencies]");
    kernels::rows_on_pool(table.rows, 2 * half, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; r++) {
        float* t = table.data + r * table.stride;
        double pos = (double)batch.rows()[(size_t)r].pos;
        for (int64_t i = 0; i < half; i++) {
          double a = pos * inv_freq[(size_t)i];  // in double, rounded to float once
          t[i] = (float)(std::cos(a) * magnitude);
          t[half + i] = (float)(std::sin(a) * magnitude);
        }
      }
    });
  }

  void rope(Tensor x, int64_t heads, Tensor table) override {
    int64_t hd = x.cols / heads;
    need(x.cols == heads * hd && table.rows == x.rows && table.cols == hd, "rope", x, "not [rows, heads * head_dim]");
    kernels::rows_on_pool(x.rows, x.cols, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; r++) {
        const float* t = table.data + r * table.stride;
        kernels::rope_neox(x.data + r * x.stride, (int)heads, (int)hd, t, t + hd / 2);
      }
    });
  }

  void rope_part(Tensor x, int64_t heads, int64_t first, int64_t dims, RopePairs pairs, Tensor table) override {
    const int64_t hw = x.cols / heads;
    need(x.cols == heads * hw && first >= 0 && first + dims <= hw && dims % 2 == 0 && table.rows == x.rows &&
             table.cols == dims,
         "rope_part", x, "not [rows, heads * head width] with an even part of the table's width inside each head");
    kernels::rows_on_pool(x.rows, heads * dims, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; r++) {
        const float* t = table.data + r * table.stride;
        float* row = x.data + r * x.stride;
        if (pairs == RopePairs::Adjacent) {
          kernels::rope_pairs(row + first, (int)heads, (int)hw, (int)dims, t, t + dims / 2);
        } else {
          for (int64_t h = 0; h < heads; h++) kernels::rope_neox(row + h * hw + first, 1, (int)dims, t, t + dims / 2);
        }
      }
    });
  }

  void latent_attention(const Memory& memory, int64_t layer, const Batch& batch, const kernels::LatentShape& s,
                        const std::vector<float>& kv_b, Tensor q, Tensor latent, Tensor out) override {
    const int64_t n = batch.size(), lw = s.latent_width();
    const LayerMemorySpec& m = memory.spec().layers.at((size_t)layer);
    need(m.kind == MemoryKind::Latent && m.latent_width == lw, "latent_attention", latent,
         "the layer's memory is not latent rows of kv_rank + rope_dim");
    need(latent.rows == n && latent.cols == lw, "latent_attention", latent, "latent is not [rows, kv_rank + rope_dim]");
    need(q.rows == n && q.cols == (int64_t)s.n_heads * s.query_width(), "latent_attention", q,
         "q is not [rows, heads * (nope + rope)]");
    need(out.rows == n && out.cols == (int64_t)s.n_heads * s.v_dim, "latent_attention", out, "out is not [rows, heads * v]");
    need((int64_t)kv_b.size() == (int64_t)s.n_heads * (s.nope_dim + s.v_dim) * s.kv_rank, "latent_attention", q,
         "kv_b is not [heads * (nope + v), kv_rank]");
    const auto& spans = batch.attention_spans();
    kernels::KvPages pages = memory.pages(layer);
    kernels::kv_store(latent.data, latent.stride, nullptr, 0, spans.data(), (int64_t)spans.size(), 1, (int)lw, pages);
    const Arena::Scope scratch_scope(arena_);
    Tensor qa = tensor(n, s.n_heads * lw), u = tensor(n, (int64_t)s.n_heads * s.kv_rank);
    kernels::absorb_queries(q.data, q.stride, n, s, kv_b.data(), qa.data, qa.stride);
    kernels::attention_paged(qa.data, qa.stride, spans.data(), (int64_t)spans.size(), s.attention(), pages, u.data,
                             u.stride);
    kernels::expand_values(u.data, u.stride, n, s, kv_b.data(), out.data, out.stride);
  }

  void attention(const Memory& memory, int64_t layer, const Batch& batch, const kernels::AttentionShape& s, Tensor q,
                 Tensor k, Tensor v, Tensor out) override {
    check_attention_shapes("cpu", batch, s, q, k, v, out);
    const auto& spans = batch.attention_spans();
    kernels::KvPages pages = memory.pages(layer);
    kernels::kv_store(k.data, k.stride, v.data, v.stride, spans.data(), (int64_t)spans.size(), s.n_kv_heads, s.head_dim, pages);
    kernels::attention_paged(q.data, q.stride, spans.data(), (int64_t)spans.size(), s, pages, out.data, out.stride);
  }

  void gated_delta_net(const Memory& memory, int64_t layer, const Batch& batch, const kernels::DeltaNetShape& s,
                       const kernels::DeltaNetWeights& w, Tensor qkvz, Tensor ba, Tensor out) override {
    const int64_t n = batch.size();
    const LayerMemorySpec& m = memory.spec().layers.at((size_t)layer);
    need(m.kind == MemoryKind::Recurrent && m.state_floats == s.state_floats(), "gated_delta_net", qkvz,
         "the layer's memory is not a recurrent state of this shape");
    need(qkvz.rows == n && qkvz.cols == s.qkvz_width(), "gated_delta_net", qkvz, "qkvz is not [rows, qkvz width]");
    need(ba.rows == n && ba.cols == s.ba_width(), "gated_delta_net", ba, "ba is not [rows, 2 x value heads]");
    need(out.rows == n && out.cols == s.out_width(), "gated_delta_net", out, "out is not [rows, value heads x dim]");
    spans_.clear();  // capacity kept: a decode step allocates nothing
    for (const BatchSpan& b : batch.spans()) {
      if (b.state < 0) fail("gated_delta_net: sequence {} has no recurrent state slot", b.seq);
      kernels::DeltaNetSpan d;
      d.row0 = b.row0, d.n = b.n, d.pos0 = b.pos0;
      d.state = memory.state(layer, b.state);
      if (b.snapshot_of_block) {
        d.blocks = b.blocks.data(), d.snapshot_of_block = b.snapshot_of_block, d.block_size = b.block_size;
        d.snapshot_base = memory.state(layer, 0);
      }
      spans_.push_back(d);
    }
    const Arena::Scope scratch_scope(arena_);
    Tensor scratch = tensor(n, s.conv_channels());
    kernels::gated_delta_net(qkvz.data, qkvz.stride, ba.data, ba.stride, spans_.data(), (int64_t)spans_.size(), s, w,
                             scratch.data, out.data, out.stride);
  }

  void moe(const MoeWeights& m, const kernels::Routing& r, Tensor x, Tensor out) override {
    const int64_t n = x.rows, H = x.cols, E = (int64_t)m.experts.size(), k = r.top_k;
    const Arena::Scope scratch_scope(arena_);  // the routing, gathered rows and expert outputs: this layer's alone
    need(E > 0 && (int64_t)m.router.size() == E * H, "moe", x, "router is not [experts, input width]");
    need(m.score_bias.empty() || (int64_t)m.score_bias.size() == E, "moe", x, "score bias is not one per expert");
    need(out.rows == n && out.cols == H && out.contiguous(), "moe", out, "output is not [rows, width] contiguous");
    const int64_t I = m.experts[0].gate.rows();
    const float* in = dense_input(x);
    Tensor logits = tensor(n, E), weights = tensor(n, k);
    kernels::matmul(in, n, H, m.router.data(), kernels::WType::F32, E, logits.data);
    int32_t* ids = arena_.ints((size_t)(n * k));
    kernels::route(logits.data, n, E, m.score_bias.empty() ? nullptr : m.score_bias.data(), r, ids, weights.data);

    // The (row, choice) pairs ordered by expert: pair_of[first[e] ..< first[e + 1]] are expert e's.
    int32_t* first = arena_.ints((size_t)E + 1);
    int32_t* pair_of = arena_.ints((size_t)(n * k));
    std::fill(first, first + E + 1, 0);
    for (int64_t p = 0; p < n * k; p++) first[ids[p] + 1]++;
    for (int64_t e = 0; e < E; e++) first[e + 1] += first[e];
    int32_t* fill = arena_.ints((size_t)E);
    std::copy(first, first + E, fill);
    for (int64_t p = 0; p < n * k; p++) pair_of[fill[ids[p]]++] = (int32_t)p;

    // Each expert's input rows, contiguous (one token: every expert reads x itself, quantised once).
    Tensor gathered = n == 1 ? Tensor::wrap(const_cast<float*>(in), 1, H) : tensor(n * k, H);
    if (n > 1)
      kernels::rows_on_pool(n * k, H, [&](int64_t s0, int64_t s1) {
        for (int64_t s = s0; s < s1; s++)
          std::memcpy(gathered.data + s * H, in + (pair_of[s] / k) * H, (size_t)H * sizeof(float));
      });
    auto input = [&](int64_t e) { return n == 1 ? in : gathered.data + first[e] * H; };
    Tensor g = tensor(n * k, I), u = tensor(n * k, I), y = tensor(n * k, H);
    jobs_.clear();
    for (int64_t e = 0; e < E; e++) {
      const int64_t rows = first[e + 1] - first[e];
      if (rows == 0) continue;
      const Expert& ex = m.experts[(size_t)e];
      need(ex.gate.rows() == I && ex.gate.cols() == H && ex.down.rows() == H, "moe", x, "an expert's shape differs");
      jobs_.push_back({&ex.gate, input(e), rows, g.data + first[e] * I});
      jobs_.push_back({&ex.up, input(e), rows, u.data + first[e] * I});
    }
    Weight::matmul_jobs(jobs_.data(), (int)jobs_.size());
    kernels::silu_mul(g.data, u.data, n * k * I);
    jobs_.clear();
    for (int64_t e = 0; e < E; e++)
      if (const int64_t rows = first[e + 1] - first[e])
        jobs_.push_back({&m.experts[(size_t)e].down, g.data + first[e] * I, rows, y.data + first[e] * H});
    Weight::matmul_jobs(jobs_.data(), (int)jobs_.size());

    // out[row] = sum of weight x expert output, added in expert order (the reference's order).
    // Each thread sums its own rows, walking every slot in the same order.
    kernels::rows_on_pool(n, k * H, [&](int64_t r0, int64_t r1) {
      std::memset(out.data + r0 * H, 0, (size_t)((r1 - r0) * H) * sizeof(float));
      for (int64_t s = 0; s < n * k; s++) {
        const int64_t p = pair_of[s], row = p / k;
        if (row < r0 || row >= r1) continue;
        kernels::lowrank_add(out.data + row * H, weights.data + p, y.data + s * H, 1, H, H);  // o += w ys, in SIMD
      }
    });
  }

  void logit_rows(Tensor x, const Batch& batch, Tensor out) override {
    need(out.rows == batch.n_logits() && out.cols == x.cols, "logit_rows", out, "not [rows wanting logits, width]");
    int64_t o = 0;
    for (int64_t r = 0; r < x.rows; r++)
      if (batch.rows()[(size_t)r].wants_logits)
        std::memcpy(out.data + (o++) * out.stride, x.data + r * x.stride, (size_t)x.cols * sizeof(float));
  }

 private:
  // The adapters' side paths of weight w: y[rows] += s * (x A^T) B^T for the rows of each sequence
  // that pairs w. Neighbouring sequences with the same adapters share one product, so a step of
  // many sequences on one adapter costs what one long sequence does.
  void add_loras(const Weight& w, const float* x, Tensor y) {
    if (!batch_ || !batch_->has_lora()) return;
    batch_->for_each_side_path(w, [&](int64_t row0, int64_t n, const LoraPair& p, float scale) {
      need(y.rows == batch_->size(), "linear", y, "an adapted weight's input rows are not the batch's rows");
      side_path(p, scale, x + row0 * w.cols(), n, y.data + row0 * y.stride);
      return true;
    });
  }

  // A decode step's side paths are ~1/30 of its base work, in 2 x projections products: on the
  // pool each would add a parallel region to the step (measured: 25% slower decode on a 2-core
  // machine with other load), so small ones run their x A^T on the calling thread and their
  // t B^T inside the base product's own region (fused_loras).
  static bool small_side_path(const LoraPair& p, int64_t n) { return n * p.a.rows() * (p.a.cols() + p.out) < (int64_t{1} << 22); }

  // t = scale * x A^T, [n, r], in the step's arena.
  Tensor side_input(const LoraPair& p, float scale, const float* x, int64_t n, bool serial) {
    const int64_t r = p.a.rows();
    Tensor t = tensor(n, r);
    serial ? p.a.matmul_serial(x, n, t.data) : p.a.matmul(x, n, t.data);
    for (int64_t i = 0; i < n * r; i++) t.data[i] *= scale;  // on the r-wide product: the cheapest place
    return t;
  }

  // y[i, c0:c1] += t_i B^T[:, c0:c1] for each row of a side path.
  struct SidePath {
    const LoraPair* p;
    const float* t;  // [n, r]
    float* y;        // [n, out], the span's first row
    int64_t n;
  };
  struct SidePaths {
    const SidePath* paths;
    size_t count;
  };
  static void add_side_paths(const void* ctx, int64_t c0, int64_t c1) {
    const SidePaths& sp = *static_cast<const SidePaths*>(ctx);
    for (size_t k = 0; k < sp.count; k++) {
      const SidePath& s = sp.paths[k];
      const int64_t r = s.p->a.rows(), out = s.p->out;
      for (int64_t i = 0; i < s.n; i++)
        s.p->bt.empty()
            ? kernels::lowrank_add_bf16(s.y + i * out + c0, s.t + i * r, s.p->bt_bf16.data() + c0, r, c1 - c0, out)
            : kernels::lowrank_add(s.y + i * out + c0, s.t + i * r, s.p->bt.data() + c0, r, c1 - c0, out);
    }
  }

  // Products of weights (one, or a group sharing their input) whose adapters' side paths are all
  // small: x A^T for each on this thread first, then one parallel region for the base products in
  // which each thread adds t B^T to the output columns it has just computed. Returns false (and
  // does nothing) when there are no side paths, or one too large for this, which add_loras runs.
  bool fused_loras(const Weight* const* ws, size_t count, const float* x, const Tensor* ys) {
    if (!batch_ || !batch_->has_lora()) return false;
    side_paths_.clear();
    size_t first[5] = {0};
    for (size_t k = 0; k < count; k++) {
      const bool small = batch_->for_each_side_path(*ws[k], [&](int64_t row0, int64_t n, const LoraPair& p, float scale) {
        if (!small_side_path(p, n)) return false;
        need(ys[k].rows == batch_->size(), "linear", ys[k], "an adapted weight's input rows are not the batch's rows");
        side_paths_.push_back({&p, nullptr, ys[k].data + row0 * ys[k].stride, n});
        side_paths_.back().t = side_input(p, scale, x + row0 * ws[k]->cols(), n, true).data;
        return true;
      });
      if (!small) return false;
      first[k + 1] = side_paths_.size();
    }
    if (side_paths_.empty()) return false;
    SidePaths ctx[4];
    Weight::Job jobs[4];
    for (size_t k = 0; k < count; k++) {
      ctx[k] = {side_paths_.data() + first[k], first[k + 1] - first[k]};
      jobs[k] = {ws[k], x, ys[k].rows, ys[k].data};
      if (ctx[k].count) jobs[k].then = add_side_paths, jobs[k].ctx = &ctx[k];
    }
    Weight::matmul_jobs(jobs, (int)count);
    return true;
  }

  void side_path(const LoraPair& p, float scale, const float* x, int64_t n, float* y) {
    const int64_t r = p.a.rows(), out = p.out;
    const bool serial = small_side_path(p, n);
    Tensor t = side_input(p, scale, x, n, serial);
    // y += t B^T as a rank-r update of each row over B^T's rows: long vector FMAs, where B's own
    // rows would make dots of length r, each ending in a horizontal sum (27% slower prefill).
    auto rows = [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; i++)
        p.bt.empty() ? kernels::lowrank_add_bf16(y + i * out, t.data + i * r, p.bt_bf16.data(), r, out, out)
                     : kernels::lowrank_add(y + i * out, t.data + i * r, p.bt.data(), r, out, out);
    };
    if (serial) rows(0, n);
    else pool().parallel_for(n, 1, rows);
  }

  Arena arena_;
  std::vector<kernels::DeltaNetSpan> spans_;  // gated_delta_net's, reused
  const Batch* batch_ = nullptr;
  std::vector<Weight::Job> jobs_;  // moe's products; grows to the most experts a step has run, then reused
  std::vector<SidePath> side_paths_;  // fused_loras'; grows to the most a product has had, then reused
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace kvad
