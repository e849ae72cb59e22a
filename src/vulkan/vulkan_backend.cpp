#include "vulkan/vulkan_backend.h"

#include <malloc.h>
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <unordered_map>

#include "backend/checks.h"
#include "backend/lora.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/fs.h"
#include "io/nq.h"
#include "vulkan/device.h"

namespace kvad {

namespace {

using vk::Buffer;
using vk::Shader;

// Weight formats as the shaders number them (shaders/common.glsl).
enum DeviceFormat : int32_t { kF32 = 0, kBF16 = 1, kQ8 = 2, kQ4 = 3, kQ4K = 4, kQ5K = 5, kQ6K = 6 };

// A weight in device memory. f32/bf16: `codes` holds the rows as stored. q8/q4: codes row-major,
// each row padded to blocks * 32 columns (u8 code + 128 offset, or u4), with f16 scales d (and q4's
// offsets m) per (row, block) in their own buffers: the row-major order is what a GPU's threads,
// one row each or one column stride each, read coalesced.
struct DeviceWeight {
  Buffer codes, d, m;
  int32_t format = kF32;
  int32_t blocks = 0;
  size_t bytes = 0;  // what the matrix takes (codes + scales), without the buffers' padding
};

// Scratch memory of one forward, as the arena of the CPU backend but on the device. A Tensor's
// data pointer is a tag: an address inside a reserved, inaccessible host range that stands for
// the same offset in the chunk's device buffer. Views (cols_view, rows_view) are plain pointer
// arithmetic on tags, and a host access through one faults instead of reading garbage.
struct ScratchChunk {
  Buffer buffer;
  uint8_t* tag = nullptr;
  size_t used = 0;
};

// Host-written inputs of one forward (token ids, positions, block tables, rope angles): mapped
// memory the shaders read directly.
struct StreamChunk {
  Buffer buffer;
  size_t used = 0;
};

// Where one forward's host-written data is.
struct StreamSlice {
  const Buffer* buffer;
  size_t offset;
  uint64_t address;
};

class VulkanMemory final : public Memory {
 public:
  VulkanMemory(vk::Device& dev, const MemorySpec& spec, int64_t n_blocks, int64_t block_size)
      : Memory(spec, n_blocks, block_size, 0, ElsewhereTag{}), dev_(dev) {
    for (const LayerMemorySpec& l : spec.layers) {
      if (l.kind != MemoryKind::Attention)
        fail("--device gpu: only attention layers' memory lives on the GPU (this model has latent or recurrent layers)");
      // kv_store.comp writes whole 32-bit words: two bf16 values, four q8 codes of one head.
      const int per_word = spec.kv_type == kernels::KvType::BF16 ? 2 : spec.kv_type == kernels::KvType::Q8 ? 4 : 1;
      if (l.head_dim % per_word != 0)
        fail("--device gpu: a {} KV cache needs a head size that is a multiple of {} (this model's is {}; --kv-type f32)",
             kernels::kv_type_name(spec.kv_type), per_word, l.head_dim);
      const size_t bytes = (size_t)(n_blocks * l.kv_heads * block_size) * row_bytes(l);
      k_.push_back(dev.allocate(bytes, false));
      v_.push_back(dev.allocate(bytes, false));
    }
  }
  ~VulkanMemory() override {
    for (Buffer& b : k_) dev_.release(b);
    for (Buffer& b : v_) dev_.release(b);
  }
  // One position of one head, as the CPU's cache stores a row (q8: the codes, then the scale).
  size_t row_bytes(const LayerMemorySpec& l) const { return (size_t)kernels::kv_row_bytes(spec().kv_type, l.head_dim); }
  const Buffer& k(int64_t layer) const { return k_.at((size_t)layer); }
  const Buffer& v(int64_t layer) const { return v_.at((size_t)layer); }

  void copy_block(int32_t src, int32_t dst, int64_t positions) override {
    for (size_t l = 0; l < spec().layers.size(); l++) {
      const LayerMemorySpec& s = spec().layers[l];
      const size_t row = row_bytes(s), head = (size_t)block_size() * row,
                   block = (size_t)s.kv_heads * head;
      for (const Buffer* b : {&k_[l], &v_[l]})
        for (int64_t h = 0; h < s.kv_heads; h++)
          dev_.copy(*b, (size_t)src * block + (size_t)h * head, *b, (size_t)dst * block + (size_t)h * head,
                    (size_t)positions * row);
    }
  }
  void copy_state(int32_t, int32_t) override { fail("--device gpu: no recurrent state on the GPU"); }
  void clear_state(int32_t) override { fail("--device gpu: no recurrent state on the GPU"); }

 private:
  vk::Device& dev_;
  std::vector<Buffer> k_, v_;
};

// Push constants, laid out as the shaders declare them (addresses first, then 32-bit fields).
struct MatmulArgs {
  uint64_t x, y, w, d, m;
  int32_t n, cols, rows, x_stride, y_stride, format, blocks;
  int32_t wide;  // matvec.comp only: rows are read as 16-byte units
};
struct GetRowsArgs {
  uint64_t out, w, d, m, ids;
  int32_t rows, cols, out_stride, format, blocks;
};
struct EltwiseArgs {
  uint64_t y, x, ids;
  int32_t op, rows, cols, y_stride, x_stride;
  float c;  // add_scaled's factor
};
struct NormArgs {
  uint64_t x, out, w, b;
  int32_t rows, cols, x_stride, out_stride, mode;
  float eps;
};
struct RopeArgs {
  uint64_t x, table;
  int32_t rows, heads, head_dim, x_stride, table_stride;
};
// The shaders name the cache's types by these numbers (common.glsl's KV_*).
static_assert((int)kernels::KvType::F32 == 0 && (int)kernels::KvType::BF16 == 1 && (int)kernels::KvType::Q8 == 2);
struct KvStoreArgs {
  uint64_t k, v, kpages, vpages, row_info, blocks;
  int32_t rows, kv_heads, head_dim, k_stride, v_stride, block_size, kv_type;  // kernels::KvType
};
struct AttentionArgs {
  uint64_t q, out, kpages, vpages, row_info, blocks;
  int32_t rows, heads, kv_heads, head_dim, q_stride, out_stride, block_size;
  float scale;
  int32_t kv_type;
};
enum EltwiseOp : int32_t { kAdd = 0, kAddBias = 1, kSiluMul = 2, kGeluTanh = 3, kAddRows = 4, kGather = 5, kAddScaled = 6 };

// matvec.comp reads a row as 16-byte units when every row starts 16-byte aligned: q8/q4 rows
// are whole blocks (32 or 16 bytes), f32 and bf16 rows need a multiple of 4 or 8 columns.
bool wide_rows(const DeviceWeight& dw, int64_t cols) {
  if (dw.codes.address % 16 != 0) return false;
  switch (dw.format) {
    case kF32: return cols % 4 == 0;
    case kBF16: return cols % 8 == 0;
    case kQ8: case kQ4: return true;
    default: return false;  // K-quants: decoded a value at a time
  }
}

int32_t narrow(int64_t v, const char* what) {
  if (v < 0 || v > INT32_MAX) fail("vulkan backend: {} = {} does not fit the shaders' 32-bit fields", what, v);
  return (int32_t)v;
}

class VulkanBackend final : public Backend {
 public:
  explicit VulkanBackend(std::unique_ptr<vk::Device> dev) : dev_(std::move(dev)) {}
  ~VulkanBackend() override {
    for (auto& [w, dw] : weights_) release(dw);
    for (auto& [p, b] : vectors_) dev_->release(b.buffer);
    for (ScratchChunk& c : scratch_) {
      dev_->release(c.buffer);
      ::munmap(c.tag, c.buffer.size);
    }
    for (StreamChunk& c : stream_) dev_->release(c.buffer);
    dev_->release(readback_);
  }
  const char* name() const override { return "vulkan"; }
  size_t held_weight_bytes() const override {
    size_t n = 0;
    for (const auto& [id, w] : weights_) n += w.bytes;
    return n;
  }

  size_t memory_capacity() const override { return (size_t)dev_->info().memory_bytes; }
  size_t memory_in_use() const override { return dev_->allocated_bytes(); }

  std::string prepare_weights(const std::vector<NamedWeight>& matrices, const std::string& cache_file,
                              const Json& source_stamp, const WeightsProgress& progress) override {
    std::string note = upload_weights(matrices, cache_file, source_stamp, progress);
    // The host's repacked copies were freed, but glibc keeps such pieces in its heap: a 0.5B q8
    // model's first GPU run held 0.35 GB more than later runs until this handed them back.
    ::malloc_trim(0);
    return note;
  }

  // prepare_weights' work: every matrix to the device, q8/q4 through the GPU cache when named.
  std::string upload_weights(const std::vector<NamedWeight>& matrices, const std::string& cache_file,
                             const Json& source_stamp, const WeightsProgress& progress) {
    // Only kvad's q8/q4 have a device layout of their own; the rest are uploaded as stored.
    Json stamp = source_stamp;
    stamp["layout"] = "vulkan-rowmajor-1";
    stamp["tensors"] = Json::array();
    for (const NamedWeight& nw : matrices)
      if (nw.weight->quantized())
        for (const char* part : {".codes", ".d", ".m"}) stamp["tensors"].push_back(nw.name + part);
    const bool cached = !cache_file.empty() && !stamp["tensors"].empty();
    std::shared_ptr<NqCheckpoint> cache;
    std::string note;
    if (cached && file_exists(cache_file)) {
      try {
        cache = std::make_shared<NqCheckpoint>(cache_file, stamp, Paging::Mapped);  // read once, to upload
      } catch (const Error& e) {  // stale or corrupt: rebuilt below
        std::remove(cache_file.c_str());
        note = std::string("GPU cache rebuilt (") + e.what() + "); ";
      }
    }
    std::deque<Repacked> written;  // alive until the writer has written them
    NqWriter writer;
    int64_t done = 0;
    for (const NamedWeight& nw : matrices) {
      if (progress) progress(done, (int64_t)matrices.size());  // before: the first is slow too
      done++;
      const Weight& w = *nw.weight;
      if (weights_.count(w.uid())) continue;
      require_host_bytes(w);
      if (!w.quantized() || !cached) {
        device_weight(w);
        continue;
      }
      if (cache) {
        try {
          TensorView c = cache->get(nw.name + ".codes"), d = cache->get(nw.name + ".d"), m = cache->get(nw.name + ".m");
          weights_.emplace(w.uid(), upload_quant(w.quant(), c.data, c.nbytes, d.data, d.nbytes, m.data, m.nbytes));
          continue;
        } catch (const Error& e) {  // a corrupt entry: this weight is repacked, the file rewritten
          cache.reset();
          std::remove(cache_file.c_str());
          note = std::string("GPU cache rebuilt (") + e.what() + "); ";
        }
      }
      written.push_back(repack(w.quant()));
      const Repacked& r = written.back();
      weights_.emplace(w.uid(), upload_quant(w.quant(), r));
      writer.add(nw.name + ".codes", DType::U8, {(int64_t)r.codes.size()}, r.codes.data(), r.codes.size());
      writer.add(nw.name + ".d", DType::U8, {(int64_t)r.d.size() * 2}, reinterpret_cast<const uint8_t*>(r.d.data()),
                 r.d.size() * 2);
      writer.add(nw.name + ".m", DType::U8, {(int64_t)r.m.size() * 2}, reinterpret_cast<const uint8_t*>(r.m.data()),
                 r.m.size() * 2);
    }
    if (progress) progress(done, done);
    if (cache) return "GPU weights from cache " + cache_file;
    if (!cached) return "";
    if (written.size() * 3 != stamp["tensors"].size()) {
      // Entries uploaded from a cache that then proved corrupt are not in this writer: the next
      // load rebuilds the whole file.
      return note + "GPU weights repacked (cache not written: rebuilt on the next load)";
    }
    try {
      make_directories(std::filesystem::path(cache_file).parent_path().string());
      writer.write(cache_file, stamp);
      return note + "repacked for the GPU, cached to " + cache_file;
    } catch (const Error& e) {  // costs speed next time, not this run
      return note + "repacked for the GPU (not cached: " + e.what() + ")";
    }
  }

  void begin_forward(const Batch& batch) override {
    dev_->submit();  // the previous forward's tail (a batch that wanted no logits) runs first
    for (ScratchChunk& c : scratch_) c.used = 0;
    for (StreamChunk& c : stream_) c.used = 0;
    batch_ = &batch;  // linear's LoRA side paths read which rows run which adapters
    // The batch's rows as the shaders read them: (position, offset of its block table), the
    // concatenated block tables, token ids, positions, and the rows that want logits.
    const int64_t n = batch.size();
    host_ints_.assign((size_t)(2 * n), 0);
    block_ids_.clear();
    for (const BatchSpan& s : batch.spans()) {
      const int32_t table = (int32_t)block_ids_.size();
      block_ids_.insert(block_ids_.end(), s.blocks.begin(), s.blocks.end());
      for (int64_t i = 0; i < s.n; i++) {
        host_ints_[(size_t)(2 * (s.row0 + i))] = narrow(s.pos0 + i, "position");
        host_ints_[(size_t)(2 * (s.row0 + i) + 1)] = table;
      }
    }
    if (block_ids_.empty()) block_ids_.push_back(0);
    row_info_ = stream_ints(host_ints_.data(), host_ints_.size());
    blocks_ = stream_ints(block_ids_.data(), block_ids_.size());
    host_ints_.clear();
    for (const BatchRow& r : batch.rows()) host_ints_.push_back(r.token);
    tokens_ = stream_ints(host_ints_.data(), host_ints_.size());
    host_ints_.clear();
    for (const BatchRow& r : batch.rows()) host_ints_.push_back(narrow(r.pos, "position"));
    positions_ = stream_ints(host_ints_.data(), host_ints_.size());
    host_ints_.clear();
    for (int64_t r = 0; r < n; r++)
      if (batch.rows()[(size_t)r].wants_logits) host_ints_.push_back((int32_t)r);
    if (host_ints_.empty()) host_ints_.push_back(0);
    logit_rows_ = stream_ints(host_ints_.data(), host_ints_.size());
  }

  Tensor tensor(int64_t rows, int64_t cols) override {
    const size_t bytes = ((size_t)(rows * cols) * sizeof(float) + 255) & ~size_t{255};
    for (ScratchChunk& c : scratch_)
      if (c.buffer.size - c.used >= bytes) {
        Tensor t = Tensor::wrap(reinterpret_cast<float*>(c.tag + c.used), rows, cols);
        c.used += bytes;
        return t;
      }
    size_t total = 0;
    for (const ScratchChunk& c : scratch_) total += c.buffer.size;
    ScratchChunk c;
    c.buffer = dev_->allocate(std::max<size_t>({bytes, total, size_t{16} << 20}), false);
    void* tag = ::mmap(nullptr, c.buffer.size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (tag == MAP_FAILED) fail("vulkan backend: reserving {} bytes of address space failed", c.buffer.size);
    c.tag = static_cast<uint8_t*>(tag);
    c.used = bytes;
    scratch_.push_back(c);
    return Tensor::wrap(reinterpret_cast<float*>(c.tag), rows, cols);
  }

  std::unique_ptr<Memory> make_memory(const MemorySpec& spec, int64_t n_blocks, int64_t block_size,
                                      int64_t n_states) override {
    if (n_states > 0 || !spec.rewindable()) fail("--device gpu: recurrent layers run on --device cpu only");
    return std::make_unique<VulkanMemory>(*dev_, spec, n_blocks, block_size);
  }

  void embed(const Weight& table, const Batch& batch, Tensor out) override {
    need(out.rows == batch.size() && out.cols == table.cols(), "embed", out, "shape differs from [rows, table width]");
    for (const BatchRow& r : batch.rows())
      if (r.token < 0 || r.token >= table.rows())
        fail("token id {} is out of range for this model's vocabulary of {}", r.token, table.rows());
    const DeviceWeight& w = device_weight(table);
    GetRowsArgs a{addr(out, "embed"), w.codes.address, w.d.address, w.m.address, tokens_.address,
                  narrow(out.rows, "rows"), narrow(out.cols, "cols"), narrow(out.stride, "stride"), w.format, w.blocks};
    vk::Grid g = vk::split_groups((uint64_t)out.rows);
    dev_->dispatch(Shader::GetRows, &a, sizeof a, g.x, g.y);
  }

  void add_position_rows(Tensor x, const std::vector<float>& table, const Batch& batch) override {
    const int64_t positions = (int64_t)table.size() / x.cols;
    for (const BatchRow& r : batch.rows())
      if (r.pos < 0 || r.pos >= positions) fail("position {} is beyond the model's {} positions", r.pos, positions);
    eltwise(kAddRows, x, device_vector(table), positions_.address, 0, "add_position_rows");
  }

  void linear(const Weight& w, Tensor x, Tensor y) override {
    need(x.cols == w.cols(), "linear", x, "input width differs from the weight's columns");
    need(y.rows == x.rows && y.cols == w.rows(), "linear", y, "output is not [n, weight rows]");
    Output o = output(y);
    product(device_weight(w), w.rows(), x, o.dev);
    add_loras(w, x, o.dev);
    finish(o);
  }

  // y = x W^T on the device, W of `rows` rows in dw's format (y in device memory).
  void product(const DeviceWeight& dw, int64_t rows, Tensor x, Tensor y) {
    MatmulArgs a{addr(x, "linear"), addr(y, "linear"), dw.codes.address, dw.d.address, dw.m.address,
                 narrow(x.rows, "rows"), narrow(x.cols, "cols"), narrow(rows, "weight rows"),
                 narrow(x.stride, "stride"), narrow(y.stride, "stride"), dw.format, dw.blocks, 0};
    const uint32_t row_blocks = (uint32_t)((x.rows + 7) / 8);  // both kernels: 8 input rows a workgroup
    if (dev_->tiled_products() && x.rows > 8) {  // a batch: 64 x 64 tiles of y per workgroup
      vk::Grid g = vk::split_groups((uint64_t)(rows + 63) / 64);
      dev_->dispatch(Shader::MatmulTiled, &a, sizeof a, g.x, g.y, (uint32_t)((x.rows + 63) / 64));
    } else if (dev_->gpu_kernels()) {
      a.wide = wide_rows(dw, x.cols) ? 1 : 0;
      vk::Grid g = vk::split_groups((uint64_t)(rows + 3) / 4);  // matvec.comp: 4 output rows a group
      dev_->dispatch(Shader::Matvec, &a, sizeof a, g.x, g.y, row_blocks);
    } else {
      vk::Grid g = vk::split_groups((uint64_t)(rows + 63) / 64);
      dev_->dispatch(Shader::Matmul, &a, sizeof a, g.x, row_blocks, g.y);
    }
  }

  // The adapters' side paths of weight w, as the CPU backend adds them (backend/lora.h): y[rows]
  // += s * (x A^T) B^T for the rows of each sequence that pairs w, neighbouring sequences with the
  // same adapters in one product. A and B are device weights like any other (B transposed once,
  // keyed by A's uid, so an adapter loaded later never finds an earlier one's B).
  void add_loras(const Weight& w, Tensor x, Tensor y) {
    if (!batch_ || !batch_->has_lora()) return;
    batch_->for_each_side_path(w, [&](int64_t row0, int64_t n, const LoraPair& p, float scale) {
      need(y.rows == batch_->size(), "linear", y, "an adapted weight's input rows are not the batch's rows");
      const Tensor xs = rows_of(x, row0, n), ys = rows_of(y, row0, n);
      Tensor t = tensor(n, p.a.rows()), u = tensor(n, p.out);
      product(device_weight(p.a), p.a.rows(), xs, t);
      product(device_weight(lora_b(p)), p.out, t, u);
      EltwiseArgs a{addr(ys, "lora"), addr(u, "lora"), 0, kAddScaled, narrow(n, "rows"), narrow(p.out, "cols"),
                    narrow(ys.stride, "stride"), narrow(u.stride, "stride"), scale};
      dispatch_eltwise(a);
      return true;
    });
  }

  static Tensor rows_of(Tensor t, int64_t row0, int64_t n) {
    t.data += row0 * t.stride;
    t.rows = n;
    return t;
  }

  // B [out, rank] of a pair (LoraPair holds it transposed), in the pair's own precision.
  const Weight& lora_b(const LoraPair& p) {
    auto it = lora_b_.find(p.a.uid());
    if (it != lora_b_.end()) return it->second;
    const int64_t r = p.a.rows(), out = p.out;
    std::vector<float> b((size_t)(out * r));
    for (int64_t k = 0; k < r; k++)
      for (int64_t o = 0; o < out; o++)
        b[(size_t)(o * r + k)] = p.bt.empty() ? bf16_to_f32(p.bt_bf16[(size_t)(k * out + o)]) : p.bt[(size_t)(k * out + o)];
    const WeightFormat fmt = p.bt.empty() ? WeightFormat::BF16 : WeightFormat::F32;  // bf16 values stay exact
    return lora_b_.emplace(p.a.uid(), Weight::from_f32(std::move(b), out, r, fmt)).first->second;
  }

  void linear_group(Tensor x, std::initializer_list<std::pair<const Weight*, Tensor>> outs) override {
    for (const auto& [w, y] : outs) linear(*w, x, y);
  }

  void add_bias(Tensor y, const std::vector<float>& b) override {
    need((int64_t)b.size() == y.cols, "add_bias", y, "bias length differs from the width");
    eltwise(kAddBias, y, device_vector(b), 0, 0, "add_bias");
  }

  void add(Tensor y, Tensor x) override {
    need(x.rows == y.rows && x.cols == y.cols, "add", x, "shapes differ");
    eltwise(kAdd, y, addr(x, "add"), 0, x.stride, "add");
  }

  void rmsnorm(Tensor x, const std::vector<float>& w, float eps, Tensor out) override {
    need((int64_t)w.size() == x.cols && out.rows == x.rows && out.cols == x.cols, "rmsnorm", x, "weight/output shape");
    norm(x, device_vector(w), 0, eps, out, 0);
  }

  void layernorm(Tensor x, const std::vector<float>& w, const std::vector<float>& b, float eps, Tensor out) override {
    need((int64_t)w.size() == x.cols && (int64_t)b.size() == x.cols && out.rows == x.rows && out.cols == x.cols,
         "layernorm", x, "weight/bias/output shape");
    norm(x, device_vector(w), device_vector(b), eps, out, 1);
  }

  void silu_mul(Tensor gate, Tensor up) override {
    need(gate.rows == up.rows && gate.cols == up.cols, "silu_mul", gate, "gate and up must be the same shape");
    eltwise(kSiluMul, gate, addr(up, "silu_mul"), 0, up.stride, "silu_mul");
  }

  void sigmoid_gate(Tensor y, Tensor) override { unsupported("sigmoid_gate"); }

  void gelu_tanh(Tensor x) override { eltwise(kGeluTanh, x, 0, 0, 0, "gelu_tanh"); }

  void rope_table(const Batch& batch, const std::vector<double>& inv_freq, Tensor table, double magnitude) override {
    const int64_t half = (int64_t)inv_freq.size();
    need(table.rows == batch.size() && table.cols == 2 * half && table.contiguous(), "rope_table", table,
         "not [rows, 2 * frequencies] contiguous");
    // Angles on the host, in double as the CPU backend computes them, then one copy.
    host_floats_.resize((size_t)(table.rows * table.cols));
    for (int64_t r = 0; r < table.rows; r++) {
      float* t = host_floats_.data() + r * table.cols;
      const double pos = (double)batch.rows()[(size_t)r].pos;
      for (int64_t i = 0; i < half; i++) {
        const double a = pos * inv_freq[(size_t)i];
        t[i] = (float)(std::cos(a) * magnitude);
        t[half + i] = (float)(std::sin(a) * magnitude);
      }
    }
    StreamSlice s = stream(host_floats_.data(), host_floats_.size() * sizeof(float));
    auto [chunk, offset] = locate(table.data, "rope_table");
    dev_->copy(*s.buffer, s.offset, chunk->buffer, offset, host_floats_.size() * sizeof(float));
  }

  void rope(Tensor x, int64_t heads, Tensor table) override {
    const int64_t hd = x.cols / heads;
    need(x.cols == heads * hd && table.rows == x.rows && table.cols == hd, "rope", x, "not [rows, heads * head_dim]");
    RopeArgs a{addr(x, "rope"), addr(table, "rope"), narrow(x.rows, "rows"), narrow(heads, "heads"), narrow(hd, "head_dim"),
               narrow(x.stride, "stride"), narrow(table.stride, "stride")};
    vk::Grid g = vk::split_groups((uint64_t)x.rows);
    dev_->dispatch(Shader::Rope, &a, sizeof a, (uint32_t)((heads * (hd / 2) + 63) / 64), g.x, g.y);
  }

  void rope_part(Tensor, int64_t, int64_t, int64_t, RopePairs, Tensor) override { unsupported("rope_part"); }

  void attention(const Memory& memory, int64_t layer, const Batch& batch, const kernels::AttentionShape& s, Tensor q,
                 Tensor k, Tensor v, Tensor out) override {
    check_attention_shapes("vulkan", batch, s, q, k, v, out);
    const int64_t kvw = (int64_t)s.n_kv_heads * s.head_dim;
    if (s.head_dim > 256 || s.v_dim() != s.head_dim)
      fail("--device gpu: attention with head size {} (values {}) is not supported (at most 256, and equal)", s.head_dim,
           s.v_dim());
    const auto* mem = dynamic_cast<const VulkanMemory*>(&memory);
    if (!mem) fail("vulkan backend attention: the KV memory was not made by this backend");
    const Buffer &kp = mem->k(layer), &vp = mem->v(layer);
    KvStoreArgs st{addr(k, "attention"), addr(v, "attention"), kp.address, vp.address, row_info_.address, blocks_.address,
                   narrow(q.rows, "rows"), s.n_kv_heads, s.head_dim, narrow(k.stride, "stride"), narrow(v.stride, "stride"),
                   narrow(memory.block_size(), "block size"), (int32_t)memory.spec().kv_type};
    vk::Grid g = vk::split_groups((uint64_t)q.rows);
    // A thread a value (f32), a word of two (bf16), a head (q8, whose scale needs all of it).
    const kernels::KvType type = memory.spec().kv_type;
    const int64_t stores = type == kernels::KvType::BF16 ? kvw / 2 : type == kernels::KvType::Q8 ? s.n_kv_heads : kvw;
    dev_->dispatch(Shader::KvStore, &st, sizeof st, (uint32_t)((stores + 255) / 256), g.x, g.y);
    AttentionArgs at{addr(q, "attention"), addr(out, "attention"), kp.address, vp.address, row_info_.address,
                     blocks_.address, narrow(q.rows, "rows"), s.n_heads, s.n_kv_heads, s.head_dim,
                     narrow(q.stride, "stride"), narrow(out.stride, "stride"), narrow(memory.block_size(), "block size"),
                     s.scale, (int32_t)memory.spec().kv_type};
    dev_->dispatch(Shader::Attention, &at, sizeof at, (uint32_t)s.n_heads, g.x, g.y);
  }

  void moe(const MoeWeights&, const kernels::Routing&, Tensor, Tensor) override { unsupported("moe"); }
  void latent_attention(const Memory&, int64_t, const Batch&, const kernels::LatentShape&, const std::vector<float>&,
                        Tensor, Tensor, Tensor) override {
    unsupported("latent_attention");
  }
  void gated_delta_net(const Memory&, int64_t, const Batch&, const kernels::DeltaNetShape&,
                       const kernels::DeltaNetWeights&, Tensor, Tensor, Tensor) override {
    unsupported("gated_delta_net");
  }

  void logit_rows(Tensor x, const Batch& batch, Tensor out) override {
    need(out.rows == batch.n_logits() && out.cols == x.cols, "logit_rows", out, "not [rows wanting logits, width]");
    Output o = output(out);
    EltwiseArgs a{addr(o.dev, "logit_rows"), addr(x, "logit_rows"), logit_rows_.address, kGather,
                  narrow(out.rows, "rows"), narrow(out.cols, "cols"), narrow(o.dev.stride, "stride"),
                  narrow(x.stride, "stride")};
    dispatch_eltwise(a);
    finish(o);
  }

 private:
  [[noreturn]] void unsupported(const char* op) const {
    fail("--device gpu: the Vulkan backend has no {} yet (mixture-of-experts, latent attention and linear-attention "
         "families run on --device cpu)",
         op);
  }
  static void need(bool ok, const char* op, const Tensor& a, const char* what) { need_shape(ok, "vulkan", op, a, what); }

  // The scratch chunk a tag points into, and the byte offset there; null when it is host memory.
  std::pair<ScratchChunk*, size_t> find(const float* p) {
    const uint8_t* b = reinterpret_cast<const uint8_t*>(p);
    for (ScratchChunk& c : scratch_)
      if (b >= c.tag && b < c.tag + c.buffer.size) return {&c, (size_t)(b - c.tag)};
    return {nullptr, 0};
  }
  std::pair<ScratchChunk*, size_t> locate(const float* p, const char* op) {
    auto found = find(p);
    if (!found.first) fail("vulkan backend {}: a tensor is in host memory (only outputs may be)", op);
    return found;
  }
  uint64_t addr(const Tensor& t, const char* op) {
    auto [c, off] = locate(t.data, op);
    return c->buffer.address + off;
  }

  // An output that may be host memory (the logits): computed into scratch, then read back.
  struct Output {
    Tensor dev, host;
    bool to_host = false;
  };
  Output output(Tensor y) {
    if (find(y.data).first) return {y, {}, false};
    return {tensor(y.rows, y.cols), y, true};
  }
  void finish(const Output& o) {
    if (!o.to_host) return;
    const size_t bytes = (size_t)(o.dev.rows * o.dev.cols) * sizeof(float);
    if (readback_.size < bytes) {
      dev_->release(readback_);
      readback_ = dev_->allocate(std::max(bytes, readback_.size * 2), true);
    }
    auto [c, off] = locate(o.dev.data, "read back");
    dev_->copy(c->buffer, off, readback_, 0, bytes);
    dev_->submit();
    const float* src = reinterpret_cast<const float*>(readback_.mapped);
    for (int64_t r = 0; r < o.host.rows; r++)
      std::memcpy(o.host.data + r * o.host.stride, src + r * o.dev.cols, (size_t)o.host.cols * sizeof(float));
  }

  StreamSlice stream(const void* data, size_t bytes) {
    const size_t need_bytes = (bytes + 255) & ~size_t{255};
    StreamChunk* chunk = nullptr;
    for (StreamChunk& c : stream_)
      if (c.buffer.size - c.used >= need_bytes) {
        chunk = &c;
        break;
      }
    if (!chunk) {
      stream_.push_back({dev_->allocate(std::max(need_bytes, size_t{4} << 20), true), 0});
      chunk = &stream_.back();
    }
    std::memcpy(chunk->buffer.mapped + chunk->used, data, bytes);
    StreamSlice s{&chunk->buffer, chunk->used, chunk->buffer.address + chunk->used};
    chunk->used += need_bytes;
    return s;
  }
  StreamSlice stream_ints(const int32_t* p, size_t n) { return stream(p, n * sizeof(int32_t)); }

  void eltwise(EltwiseOp op, Tensor y, uint64_t x, uint64_t ids, int64_t x_stride, const char* name) {
    EltwiseArgs a{addr(y, name), x, ids, op, narrow(y.rows, "rows"), narrow(y.cols, "cols"), narrow(y.stride, "stride"),
                  narrow(x_stride, "stride")};
    dispatch_eltwise(a);
  }
  void dispatch_eltwise(const EltwiseArgs& a) {
    vk::Grid g = vk::split_groups((uint64_t)a.rows);
    dev_->dispatch(Shader::Eltwise, &a, sizeof a, (uint32_t)((a.cols + 255) / 256), g.x, g.y);
  }

  void norm(Tensor x, uint64_t w, uint64_t b, float eps, Tensor out, int32_t mode) {
    Output o = output(out);
    NormArgs a{addr(x, "norm"), addr(o.dev, "norm"), w, b, narrow(x.rows, "rows"), narrow(x.cols, "cols"),
               narrow(x.stride, "stride"), narrow(o.dev.stride, "stride"), mode, eps};
    vk::Grid g = vk::split_groups((uint64_t)x.rows);
    dev_->dispatch(Shader::Norm, &a, sizeof a, g.x, g.y);
    finish(o);
  }

  // A model's constant vector (norm weights, biases, a position table) on the device, copied once.
  // Known by its address, and checked against the host copy kept beside it on every use (a few
  // KB per call): a vector freed and another made at the same address is copied again, never
  // mistaken for the old one.
  uint64_t device_vector(const std::vector<float>& v) {
    auto it = vectors_.find(v.data());
    if (it != vectors_.end() && it->second.host == v) return it->second.buffer.address;
    if (it != vectors_.end()) dev_->release(it->second.buffer);
    Buffer b = dev_->allocate(v.size() * sizeof(float), false);
    dev_->upload(b, 0, v.data(), v.size() * sizeof(float));
    vectors_[v.data()] = {b, v};
    return b.address;
  }

  // A weight another engine's GPU copy replaced on the host (Model::release_host_matrices) has no
  // bytes left to copy: a second engine on such a model is refused, not fed a null pointer.
  static void require_host_bytes(const Weight& w) {
    if (w.host_released())
      fail("--device gpu: this model's weights were released from host memory once its first engine held them on "
           "the GPU; a second engine needs the model loaded again");
  }

  const DeviceWeight& device_weight(const Weight& w) {
    auto it = weights_.find(w.uid());
    if (it != weights_.end()) return it->second;
    require_host_bytes(w);
    DeviceWeight dw;
    if (const void* dense = w.dense_data()) {
      const bool f32 = w.dense_type() == kernels::WType::F32;
      const size_t bytes = (size_t)(w.rows() * w.cols()) * (f32 ? 4 : 2);
      dw.format = f32 ? kF32 : kBF16;
      dw.codes = dev_->allocate(bytes, false);
      dev_->upload(dw.codes, 0, dense, bytes);
      dw.bytes = bytes;
    } else if (w.quantized()) {
      dw = upload_quant(w.quant(), repack(w.quant()));
    } else if (const KQuantMatrix& k = w.kquant()) {  // GGUF's blocks as they are, read in place by the shaders
      dw.format = k.type() == DType::Q4_K ? kQ4K : k.type() == DType::Q5_K ? kQ5K : kQ6K;
      dw.blocks = (int32_t)k.blocks();
      dw.codes = dev_->allocate(k.bytes() + 4, false);  // + 4: the shaders read whole words
      dev_->upload(dw.codes, 0, k.row_data(0), k.bytes());
      dw.bytes = k.bytes();
    } else {
      fail("--device gpu: {} weights are not on the GPU yet (use --quant bf16, q8 or q4)", w.format_name());
    }
    return weights_.emplace(w.uid(), dw).first->second;
  }

  // A q8/q4 weight in the device's layout, on the host: what is uploaded, and what the GPU cache
  // file holds.
  struct Repacked {
    std::vector<uint8_t> codes;
    std::vector<uint16_t> d, m;
  };

  // kvad's q8/q4 records (quant/packed.h: 16 rows interleaved 4 bytes at a time, for VNNI) into
  // the device's row-major codes + per-block f16 scales; the codes and scales are the same
  // numbers, so nothing is requantised.
  static Repacked repack(const QuantMatrix& q) {
    const bool q8 = q.kind() == QKind::Q8;
    const int64_t rows = q.rows(), blocks = q.blocks(), padded = blocks * QuantMatrix::kBlock;
    Repacked out;
    std::vector<uint8_t>& codes = out.codes;
    codes.assign((size_t)(q8 ? rows * padded : (rows * padded + 1) / 2) + 4, 0);
    out.d.assign((size_t)(rows * blocks) + 2, 0);
    out.m.assign(q8 ? 2 : (size_t)(rows * blocks) + 2, 0);
    for (int64_t g = 0; g < q.groups(); g++)
      for (int64_t b = 0; b < blocks; b++) {
        const uint8_t* rec = q.record(g, b);
        for (int64_t r = 0; r < QuantMatrix::kRows; r++) {
          const int64_t row = g * QuantMatrix::kRows + r;
          if (row >= rows) break;
          const size_t sb = (size_t)(row * blocks + b);
          uint8_t* dst = codes.data() + (size_t)(row * padded + b * QuantMatrix::kBlock) / (q8 ? 1 : 2);
          for (int step = 0; step < 8; step++) {  // 4 columns per step, one byte (or nibble) each
            for (int j = 0; j < 4; j++) {
              const int c = step * 4 + j;
              if (q8) {
                dst[c] = rec[step * 64 + r * 4 + j];
              } else {
                const uint8_t byte = rec[(step / 2) * 64 + r * 4 + j];
                const uint8_t code = step % 2 ? byte >> 4 : byte & 15;
                dst[c / 2] |= (uint8_t)(c % 2 ? code << 4 : code);
              }
            }
          }
          std::memcpy(&out.d[sb], rec + (q8 ? 512 : 256) + r * 2, 2);
          if (!q8) std::memcpy(&out.m[sb], rec + 288 + r * 2, 2);
        }
      }
    return out;
  }

  // Uploads a q8/q4 weight's device layout (from a repack or from the cache file).
  DeviceWeight upload_quant(const QuantMatrix& q, const uint8_t* codes, size_t codes_bytes, const uint8_t* d,
                            size_t d_bytes, const uint8_t* m, size_t m_bytes) {
    DeviceWeight dw;
    const bool q8 = q.kind() == QKind::Q8;
    const int64_t rows = q.rows(), blocks = q.blocks(), padded = blocks * QuantMatrix::kBlock;
    dw.format = q8 ? kQ8 : kQ4;
    dw.blocks = (int32_t)blocks;
    dw.codes = dev_->allocate(codes_bytes, false);
    dev_->upload(dw.codes, 0, codes, codes_bytes);
    dw.d = dev_->allocate(d_bytes, false);
    dev_->upload(dw.d, 0, d, d_bytes);
    dw.m = dev_->allocate(m_bytes, false);
    dev_->upload(dw.m, 0, m, m_bytes);
    dw.bytes = (size_t)(q8 ? rows * padded : rows * padded / 2) + (size_t)(rows * blocks) * (q8 ? 2 : 4);
    return dw;
  }
  DeviceWeight upload_quant(const QuantMatrix& q, const Repacked& r) {
    return upload_quant(q, r.codes.data(), r.codes.size(), reinterpret_cast<const uint8_t*>(r.d.data()), r.d.size() * 2,
                        reinterpret_cast<const uint8_t*>(r.m.data()), r.m.size() * 2);
  }

  void release(DeviceWeight& dw) {
    dev_->release(dw.codes);
    dev_->release(dw.d);
    dev_->release(dw.m);
  }

  struct DeviceVector {
    Buffer buffer;
    std::vector<float> host;
  };

  std::unique_ptr<vk::Device> dev_;
  std::vector<ScratchChunk> scratch_;
  std::vector<StreamChunk> stream_;
  Buffer readback_;
  std::unordered_map<uint64_t, DeviceWeight> weights_;  // by Weight::uid()
  std::unordered_map<uint64_t, Weight> lora_b_;  // each LoRA pair's B, by its A's uid
  const Batch* batch_ = nullptr;  // this forward's (begin_forward)
  std::unordered_map<const float*, DeviceVector> vectors_;
  StreamSlice row_info_{}, blocks_{}, tokens_{}, positions_{}, logit_rows_{};
  std::vector<int32_t> host_ints_, block_ids_;
  std::vector<float> host_floats_;
};

}  // namespace

std::unique_ptr<Backend> make_vulkan_backend(const std::string& device) {
  return std::make_unique<VulkanBackend>(vk::Device::open(device));
}

}  // namespace kvad
