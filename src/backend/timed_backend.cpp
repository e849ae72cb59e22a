#include "backend/timed_backend.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "core/timing_table.h"

namespace kvad {

bool backend_profile_requested() {
  const char* e = std::getenv("KVAD_PROFILE");
  return e && *e && std::string(e) != "0";
}

namespace {

#define KVAD_TIMED_OPS(X)                                                                                   \
  X(BeginForward, "begin_forward") X(Embed, "embed") X(AddPositionRows, "add_position_rows")                \
  X(Linear, "linear") X(LinearGroup, "linear_group") X(AddBias, "add_bias") X(Add, "add")                  \
  X(Rmsnorm, "rmsnorm") X(Layernorm, "layernorm") X(SiluMul, "silu_mul") X(SigmoidGate, "sigmoid_gate")     \
  X(GeluTanh, "gelu_tanh") X(RopeTable, "rope_table") X(Rope, "rope") X(RopePart, "rope_part")              \
  X(Attention, "attention") X(Moe, "moe") X(LatentAttention, "latent_attention")                          \
  X(GatedDeltaNet, "gated_delta_net") X(LogitRows, "logit_rows")

enum class Op {
#define KVAD_OP_ENUM(e, s) e,
  KVAD_TIMED_OPS(KVAD_OP_ENUM)
#undef KVAD_OP_ENUM
      Count
};
constexpr const char* kOpNames[] = {
#define KVAD_OP_NAME(e, s) s,
    KVAD_TIMED_OPS(KVAD_OP_NAME)
#undef KVAD_OP_NAME
};

// A matrix product's weights: its time per shape says which products read memory slower than
// the others (bytes / time = the weights' read rate, the bound of a decode step).
struct Product {
  int64_t rows = 0, cols = 0;  // a group's rows are its matrices' together
  size_t bytes = 0;
  const char* format = "";
  int matrices = 0;    // 0: not a product
  bool mixed = false;  // a group whose matrices are not all in `format` (a Q4_K_M's q/k and Q6_K v)
  bool operator==(const Product& o) const {
    return rows == o.rows && cols == o.cols && bytes == o.bytes && matrices == o.matrices;
  }
};
struct ProductTotal {
  Product product;
  uint64_t calls = 0;
  double s = 0;
};

// The product a call makes with weights ws[0..n) (one matrix, or a group over one input).
Product product_of(const Weight* const* ws, size_t n) {
  Product p;
  p.cols = ws[0]->cols();
  p.format = ws[0]->format_name();
  p.matrices = (int)n;
  for (size_t i = 0; i < n; i++) {
    p.rows += ws[i]->rows();
    p.bytes += ws[i]->bytes();
    p.mixed = p.mixed || std::string_view(ws[i]->format_name()) != p.format;
  }
  return p;
}

class TimedBackend final : public Backend {
 public:
  explicit TimedBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  ~TimedBackend() override { std::fputs(report().c_str(), stderr); }

  const char* name() const override { return inner_->name(); }
  size_t held_weight_bytes() const override { return inner_->held_weight_bytes(); }
  size_t memory_capacity() const override { return inner_->memory_capacity(); }
  size_t memory_in_use() const override { return inner_->memory_in_use(); }
  std::string prepare_weights(const std::vector<NamedWeight>& matrices, const std::string& cache_file,
                              const Json& stamp, const WeightsProgress& progress) override {
    return inner_->prepare_weights(matrices, cache_file, stamp, progress);
  }
  void begin_forward(const Batch& batch) override {
    decode_ = batch.rows().size() == 1;
    Timer t(*this, Op::BeginForward);
    inner_->begin_forward(batch);
  }
  Tensor tensor(int64_t rows, int64_t cols) override { return inner_->tensor(rows, cols); }
  std::unique_ptr<Memory> make_memory(const MemorySpec& spec, int64_t n_blocks, int64_t block_size,
                                      int64_t n_states) override {
    return inner_->make_memory(spec, n_blocks, block_size, n_states);
  }

  void embed(const Weight& table, const Batch& batch, Tensor out) override {
    Timer t(*this, Op::Embed);
    inner_->embed(table, batch, out);
  }
  void add_position_rows(Tensor x, const std::vector<float>& table, const Batch& batch) override {
    Timer t(*this, Op::AddPositionRows);
    inner_->add_position_rows(x, table, batch);
  }
  void linear(const Weight& w, Tensor x, Tensor y) override {
    const Weight* one = &w;
    Timer t(*this, Op::Linear, product_of(&one, 1));
    inner_->linear(w, x, y);
  }
  void linear_group(Tensor x, std::initializer_list<std::pair<const Weight*, Tensor>> outs) override {
    const Weight* ws[8] = {};
    size_t n = 0;
    for (const auto& [w, y] : outs)
      if (n < 8) ws[n++] = w;  // models group 2 or 3 (the CPU backend refuses over 4)
    Timer t(*this, Op::LinearGroup, product_of(ws, n));
    inner_->linear_group(x, outs);
  }
  void add_bias(Tensor y, const std::vector<float>& b) override {
    Timer t(*this, Op::AddBias);
    inner_->add_bias(y, b);
  }
  void add(Tensor y, Tensor x) override {
    Timer t(*this, Op::Add);
    inner_->add(y, x);
  }
  void rmsnorm(Tensor x, const std::vector<float>& w, float eps, Tensor out) override {
    Timer t(*this, Op::Rmsnorm);
    inner_->rmsnorm(x, w, eps, out);
  }
  void layernorm(Tensor x, const std::vector<float>& w, const std::vector<float>& b, float eps, Tensor out) override {
    Timer t(*this, Op::Layernorm);
    inner_->layernorm(x, w, b, eps, out);
  }
  void silu_mul(Tensor gate, Tensor up) override {
    Timer t(*this, Op::SiluMul);
    inner_->silu_mul(gate, up);
  }
  void sigmoid_gate(Tensor y, Tensor gate) override {
    Timer t(*this, Op::SigmoidGate);
    inner_->sigmoid_gate(y, gate);
  }
  void gelu_tanh(Tensor x) override {
    Timer t(*this, Op::GeluTanh);
    inner_->gelu_tanh(x);
  }
  void rope_table(const Batch& batch, const std::vector<double>& inv_freq, Tensor table, double magnitude) override {
    Timer t(*this, Op::RopeTable);
    inner_->rope_table(batch, inv_freq, table, magnitude);
  }
  void rope(Tensor x, int64_t heads, Tensor table) override {
    Timer t(*this, Op::Rope);
    inner_->rope(x, heads, table);
  }
  void rope_part(Tensor x, int64_t heads, int64_t first, int64_t dims, RopePairs pairs, Tensor table) override {
    Timer t(*this, Op::RopePart);
    inner_->rope_part(x, heads, first, dims, pairs, table);
  }
  void attention(const Memory& memory, int64_t layer, const Batch& batch, const kernels::AttentionShape& shape,
                 Tensor q, Tensor k, Tensor v, Tensor out) override {
    Timer t(*this, Op::Attention);
    inner_->attention(memory, layer, batch, shape, q, k, v, out);
  }
  void moe(const MoeWeights& layer, const kernels::Routing& routing, Tensor x, Tensor out) override {
    Timer t(*this, Op::Moe);
    inner_->moe(layer, routing, x, out);
  }
  void latent_attention(const Memory& memory, int64_t layer, const Batch& batch, const kernels::LatentShape& shape,
                        const std::vector<float>& kv_b, Tensor q, Tensor latent, Tensor out) override {
    Timer t(*this, Op::LatentAttention);
    inner_->latent_attention(memory, layer, batch, shape, kv_b, q, latent, out);
  }
  void gated_delta_net(const Memory& memory, int64_t layer, const Batch& batch, const kernels::DeltaNetShape& shape,
                       const kernels::DeltaNetWeights& weights, Tensor qkvz, Tensor ba, Tensor out) override {
    Timer t(*this, Op::GatedDeltaNet);
    inner_->gated_delta_net(memory, layer, batch, shape, weights, qkvz, ba, out);
  }
  void logit_rows(Tensor x, const Batch& batch, Tensor out) override {
    Timer t(*this, Op::LogitRows);
    inner_->logit_rows(x, batch, out);
  }

 private:
  using Clock = std::chrono::steady_clock;
  struct Total {
    uint64_t calls = 0;
    double s = 0;
  };
  static constexpr size_t kMaxProducts = 64;  // distinct shapes a model has (~8); the rest are pooled
  // [decode or batch][op]: fixed tables, so a timed decode step allocates nothing either.
  Total totals_[2][(size_t)Op::Count];
  ProductTotal products_[2][kMaxProducts];
  size_t n_products_[2] = {0, 0};
  bool decode_ = false;

  void add_product(const Product& p, double seconds) {
    const int phase = decode_ ? 0 : 1;
    ProductTotal* slots = products_[phase];
    size_t& n = n_products_[phase];
    size_t i = 0;
    while (i < n && !(slots[i].product == p)) i++;
    if (i == n) {
      if (n == kMaxProducts) i = n - 1;  // pooled into the last slot, which report() labels so
      else slots[n++].product = p;
    }
    slots[i].calls++;
    slots[i].s += seconds;
  }

  class Timer {
   public:
    Timer(TimedBackend& be, Op op, Product product = {})
        : be_(be), op_(op), product_(product), start_(Clock::now()) {}
    ~Timer() {
      Total& t = be_.totals_[be_.decode_ ? 0 : 1][(size_t)op_];
      const double s = std::chrono::duration<double>(Clock::now() - start_).count();
      t.calls++;
      t.s += s;
      if (product_.matrices > 0) be_.add_product(product_, s);
    }
    Timer(const Timer&) = delete;
    Timer& operator=(const Timer&) = delete;

   private:
    TimedBackend& be_;
    Op op_;
    Product product_;
    Clock::time_point start_;
  };

  std::string product_report(int phase) const {
    std::vector<TimingRow> rows;
    for (size_t i = 0; i < n_products_[phase]; i++) {
      const ProductTotal& pt = products_[phase][i];
      const Product& p = pt.product;
      const double gbs = pt.s > 0 ? (double)p.bytes * (double)pt.calls / pt.s / 1e9 : 0;
      std::string label = i + 1 == kMaxProducts ? "(other shapes)"
                                                : fmt::format("{}x{} {}{}{}, {:.1f} GB/s", p.rows, p.cols, p.format,
                                                              p.mixed ? " and others" : "",
                                                              p.matrices > 1 ? fmt::format(" ({} matrices)", p.matrices) : "",
                                                              gbs);
      rows.push_back({std::move(label), pt.calls, pt.s});
    }
    return timing_table(std::move(rows), "matrix product: rows x cols, format, weights read per second");
  }

  std::string report() const {
    std::string out;
    for (int phase = 0; phase < 2; phase++) {
      const uint64_t forwards = totals_[phase][(size_t)Op::BeginForward].calls;
      if (forwards == 0) continue;
      std::vector<TimingRow> rows;
      double all = 0;
      for (size_t i = 0; i < (size_t)Op::Count; i++) {
        rows.push_back({kOpNames[i], totals_[phase][i].calls, totals_[phase][i].s});
        all += totals_[phase][i].s;
      }
      out += fmt::format("Backend profile (KVAD_PROFILE, {}): {} {} forwards, {:.1f} ms in backend calls ({:.3f} ms a forward)\n",
                         inner_->name(), forwards, phase == 0 ? "decode (one-row)" : "batch", all * 1e3,
                         all * 1e3 / (double)forwards) +
             timing_table(std::move(rows), "operation") + product_report(phase);
    }
    return out;
  }

  std::unique_ptr<Backend> inner_;
};

}  // namespace

std::unique_ptr<Backend> make_timed_backend(std::unique_ptr<Backend> inner) {
  return std::make_unique<TimedBackend>(std::move(inner));
}

}  // namespace kvad
