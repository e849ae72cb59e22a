// A minimal GGUF writer for tests and fuzz seeds: metadata of the common value types and tensors
// with raw bytes, laid out as llama.cpp writes them (header, key/values, tensor infos, padding to
// the alignment, data with each tensor padded). Header-only; no validation (tests write bad files
// on purpose by editing the bytes it returns).
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace kvad::test {

class GgufWriter {
 public:
  enum : uint32_t { U8 = 0, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 };

  uint32_t version = 3;
  uint64_t alignment = 32;
  bool allow_duplicates = false;  // false: setting a key again replaces its value

  void str(const std::string& key, const std::string& v) { kv(key, STRING, sbytes(v)); }
  void u32(const std::string& key, uint32_t v) { kv(key, U32, pod(v)); }
  void i32(const std::string& key, int32_t v) { kv(key, I32, pod(v)); }
  void f32(const std::string& key, float v) { kv(key, F32, pod(v)); }
  void boolean(const std::string& key, bool v) { kv(key, BOOL, std::string(1, v ? 1 : 0)); }
  void strs(const std::string& key, const std::vector<std::string>& v) {
    std::string b = pod(STRING) + pod((uint64_t)v.size());
    for (const std::string& s : v) b += sbytes(s);
    kv(key, ARRAY, b);
  }
  void i32s(const std::string& key, const std::vector<int32_t>& v) {
    std::string b = pod(I32) + pod((uint64_t)v.size());
    for (int32_t x : v) b += pod(x);
    kv(key, ARRAY, b);
  }
  // A tensor: ne in ggml order (ne[0] = row length), ggml type id, raw bytes.
  // offset: the data offset to write instead of the next free one (for bad files).
  void tensor(const std::string& name, std::vector<int64_t> ne, uint32_t ggml_type, std::string bytes,
              int64_t offset = -1) {
    tensors_.push_back({name, std::move(ne), ggml_type, std::move(bytes), offset});
  }
  void f32_tensor(const std::string& name, std::vector<int64_t> ne, const std::vector<float>& v) {
    tensor(name, std::move(ne), 0, std::string((const char*)v.data(), v.size() * 4));
  }

  std::string bytes() const {
    std::string out = pod((uint32_t)0x46554747) + pod(version) + pod((uint64_t)tensors_.size()) + pod((uint64_t)kvs_.size());
    for (const std::string& k : kvs_) out += k;
    uint64_t off = 0;
    std::vector<uint64_t> offs;
    for (const T& t : tensors_) {
      out += sbytes(t.name) + pod((uint32_t)t.ne.size());
      for (int64_t d : t.ne) out += pod(d);
      out += pod(t.type) + pod(t.offset >= 0 ? (uint64_t)t.offset : off);
      offs.push_back(off);
      off += pad(t.bytes.size());
    }
    out.append(pad(out.size()) - out.size(), '\0');
    for (const T& t : tensors_) {
      out += t.bytes;
      out.append(pad(t.bytes.size()) - t.bytes.size(), '\0');
    }
    return out;
  }

  template <typename V>
  static std::string pod(V v) {
    return std::string((const char*)&v, sizeof v);
  }
  static std::string sbytes(const std::string& s) { return pod((uint64_t)s.size()) + s; }

 private:
  struct T {
    std::string name;
    std::vector<int64_t> ne;
    uint32_t type;
    std::string bytes;
    int64_t offset;
  };
  void kv(const std::string& key, uint32_t type, const std::string& value) {
    std::string prefix = sbytes(key);
    for (std::string& k : kvs_)
      if (!allow_duplicates && k.compare(0, prefix.size(), prefix) == 0) {
        k = prefix + pod(type) + value;
        return;
      }
    kvs_.push_back(prefix + pod(type) + value);
  }
  uint64_t pad(uint64_t n) const { return (n + alignment - 1) / alignment * alignment; }
  std::vector<std::string> kvs_;
  std::vector<T> tensors_;
};

inline std::vector<float> iota_floats(size_t n, float scale = 1) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; i++) v[i] = (float)i * scale;
  return v;
}

// A small llama file: 2 heads of 4 (q), 1 kv head, hidden 8, one layer, vocab 6; Q's rows hold
// value 8 * row + col, so a permutation shows; rope_freqs.weight for llama3-style scaling.
inline GgufWriter small_llama_gguf() {
  GgufWriter w;
  w.str("general.architecture", "llama");
  w.u32("llama.block_count", 1);
  w.u32("llama.context_length", 64);
  w.u32("llama.embedding_length", 8);
  w.u32("llama.feed_forward_length", 16);
  w.u32("llama.attention.head_count", 2);
  w.u32("llama.attention.head_count_kv", 1);
  w.f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.f32("llama.rope.freq_base", 500000.0f);
  w.f32_tensor("token_embd.weight", {8, 6}, iota_floats(48));
  w.f32_tensor("blk.0.attn_q.weight", {8, 8}, iota_floats(64));
  w.f32_tensor("rope_freqs.weight", {2}, {1.0f, 4.0f});
  return w;
}

}  // namespace kvad::test
