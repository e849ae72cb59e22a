// GGUF (llama.cpp's single-file format, versions 2 and 3), read through mmap and validated fully
// before anything is used: magic and version, every count and string length against the bytes
// left (overflow-checked), value types, duplicate keys and names, n_dims <= 4, shapes whose rows
// are whole blocks, general.alignment, tensor offsets aligned, in range and non-overlapping.
//
//   u32 magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//   n_kv x (string key, u32 type, value)           string = u64 length + bytes; arrays: u32 type, u64 n, items
//   n_tensors x (string name, u32 n_dims, i64 ne[n_dims], u32 ggml type, u64 offset)
//   padding to general.alignment (default 32), then the data section; offsets are relative to it.
//
// ne[0] is the row length (the contiguous dimension): a GGUF matrix [ne0, ne1] is the row-major
// [ne1, ne0] matrix of Hugging Face / numpy order.
//
// GgufCheckpoint presents the tensors under the names a GgufNameMap gives them. io knows no
// architecture: the map comes from the family's tensor table (models/tensors.h, built by the
// models-layer GGUF loader, models/gguf_config.h), and says per tensor its Hugging Face name,
// whether it is a Conv1D matrix (GGUF stores GPT-2's [out, in] where HF says [in, out]: marked
// transposed) and whether llama.cpp permuted its Q/K rows (undone here). Names the map does not
// know keep their GGUF name, so the unread-tensor guard reports them. A stacked MoE expert tensor
// (3-D, llama.cpp's `*_exps`) is presented as one matrix per expert, each a view of its slice. gguf_tokenizer() turns the
// metadata into the tokenizer.json / tokenizer_config.json the rest of kvad reads.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/json.h"
#include "core/mmap_file.h"
#include "io/checkpoint.h"

namespace kvad {

enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8, ARRAY = 9,
  U64 = 10, I64 = 11, F64 = 12,
};
const char* gguf_type_name(GgufType t);

// One metadata value. Scalars are decoded; arrays keep a view of their bytes (numbers) or of their
// strings. Views point into the file's bytes.
struct GgufValue {
  GgufType type = GgufType::U8;
  GgufType elem = GgufType::U8;  // arrays: the element type
  uint64_t count = 0;            // arrays: number of elements
  // Scalars: integers in i (signed types, bool) or u (unsigned types); floats in f.
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  std::string_view str;                // STRING
  const uint8_t* items = nullptr;      // arrays of numbers: count x element size, little-endian
  std::vector<std::string_view> strs;  // arrays of strings

  bool is_int() const;  // any integer type (not bool)
  bool is_float() const { return type == GgufType::F32 || type == GgufType::F64; }
  // Array elements as numbers (arrays of integer / float / bool types).
  int64_t int_at(uint64_t k) const;
  double float_at(uint64_t k) const;
};

struct GgufTensorInfo {
  std::string name;
  uint32_t ggml_type = 0;
  DType dtype = DType::F32;
  std::vector<int64_t> ne;  // ggml order: ne[0] is the row length
  uint64_t offset = 0;      // from the start of the data section
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
};

// A parsed, validated GGUF image (memory-mapped file or caller's bytes).
class GgufFile {
 public:
  explicit GgufFile(const std::string& path);
  // Parses bytes the caller keeps alive (fuzzing, tests); `what` names them in errors.
  GgufFile(const uint8_t* data, size_t size, const std::string& what);

  const std::string& what() const { return what_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* tensor(const std::string& name) const;
  // [p, p + n) lies in the file's mapping (not in a caller's bytes or a copy made from them).
  bool maps(const void* p, size_t n) const;

  const GgufValue* find(const std::string& key) const;
  // Typed reads; a present key of the wrong type is an error naming it.
  std::optional<std::string> get_string(const std::string& key) const;
  std::optional<int64_t> get_int(const std::string& key) const;  // any integer type
  std::optional<double> get_float(const std::string& key) const;  // float or integer types
  std::optional<bool> get_bool(const std::string& key) const;
  // An array of strings / of integers; nullptr (strings) or {} when absent.
  const std::vector<std::string_view>* get_string_array(const std::string& key) const;
  std::optional<std::vector<int64_t>> get_int_array(const std::string& key) const;

 private:
  void parse(const uint8_t* data, size_t size);
  std::unique_ptr<MappedFile> map_;
  std::string what_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

// The ggml type name (e.g. "Q4_K", "IQ2_XXS") or "type N" for ids ggml does not define.
std::string ggml_type_name(uint32_t ggml_type);

// How one GGUF tensor is presented (see the top of this file).
struct GgufTensorMapping {
  std::string hf;               // the name the family loader reads
  bool conv1d = false;          // a GPT-2 Conv1D matrix: presented [in, out], transposed
  int64_t unpermute_heads = 0;  // > 0: llama.cpp permuted its rows over this many heads
  // A stacked expert tensor ([experts, rows, cols]): presented as one 2-D matrix per expert,
  // experts[e] naming slice e (hf is then unused).
  std::vector<std::string> experts;
};
using GgufNameMap = std::map<std::string, GgufTensorMapping>;  // by GGUF tensor name

class GgufCheckpoint : public Checkpoint {
 public:
  // With no map every tensor keeps its GGUF name (a view of the file, e.g. for `kvad show`).
  explicit GgufCheckpoint(std::shared_ptr<const GgufFile> file, const GgufNameMap& names = {});
  std::vector<std::string> names() const override;
  const GgufFile& file() const { return *file_; }
  const std::string& architecture() const { return arch_; }  // general.architecture
  // A tensor the family builds from others of the file (DeepSeek's kv_b_proj from llama.cpp's
  // per-head attn_k_b / attn_v_b): presented under v.name, its bytes owned here.
  void add_derived(TensorView v, std::shared_ptr<std::vector<uint8_t>> bytes);
  // Drops the pages of a tensor the load copied (Checkpoint::release), if they are the file's.
  void release(const TensorView& t) const override;

 protected:
  const TensorView* lookup(const std::string& name) const override;

 private:
  void build(const GgufNameMap& names);
  void add_expert_slices(const GgufTensorInfo& t, const std::vector<std::string>& experts);
  std::shared_ptr<const GgufFile> file_;
  std::string arch_;
  std::map<std::string, TensorView> views_;                // by presented (HF) name
  std::vector<std::shared_ptr<std::vector<uint8_t>>> owned_;  // un-permuted copies
};

// The parts of the GGUF tokenizer (byte-level BPE: tokenizer.ggml.model "gpt2") in tokenizer.json's
// terms: vocabulary and merges, CONTROL / USER_DEFINED tokens as added
// tokens, the pre-tokenizer of tokenizer.ggml.pre (qwen2, llama-bpe, gpt-2, smollm and their
// aliases), BOS/EOS and add_bos/add_eos as a template post-processor, tokenizer.chat_template.
struct GgufTokenizerParts {
  Json tokenizer;  // tokenizer.json, but for its model's vocab and merges: those are below
  Json config;     // tokenizer_config.json
  std::vector<int32_t> end_of_generation;  // eos, eot, eom ids and llama.cpp's end-of-turn tokens
  // The BPE vocabulary (a piece listed twice keeps its first id) and merges ("a b"), views into the
  // GgufFile's metadata, valid while it is: the tokenizer reads them into its tables
  // (runtime/gguf_loader.h tokenizer_of_gguf) without a Json of 150k entries between.
  std::vector<std::pair<std::string_view, int32_t>> vocab;
  std::vector<std::string_view> merges;
};
GgufTokenizerParts gguf_tokenizer(const GgufFile& f);

// Undoes llama.cpp's permutation of Q/K rows for the llama architecture (convert_hf_to_gguf.py
// LlamaModel.permute: per head, rows (2, half) -> (half, 2)). `row_bytes` per row, rows = n_head x
// head_dim; works on any row format since quantisation blocks run along rows.
void gguf_unpermute_rows(const uint8_t* src, uint8_t* dst, int64_t rows, size_t row_bytes, int64_t n_head);

}  // namespace kvad
