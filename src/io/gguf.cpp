#include "io/gguf.h"

#include <algorithm>
#include <cstring>

#include <fmt/ranges.h>

#include "core/error.h"

namespace kvad {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr size_t kMaxName = 64;          // GGML_MAX_NAME: tensor names are shorter than this
constexpr int kMaxDims = 4;              // GGML_MAX_DIMS

size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    default: return 0;
  }
}

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);  // little-endian on every target we build for
  return v;
}

// Bounds-checked reads over the file image; errors name the file, the offset and the item.
struct Cursor {
  const uint8_t* data;
  size_t size;
  size_t pos = 0;
  const std::string& what;

  size_t left() const { return size - pos; }
  void need(uint64_t n, const std::string& item) const {
    if (n > left())
      fail("{}: truncated at byte {} reading {} (needs {} bytes, {} left)", what, pos, item, n, left());
  }
  uint32_t u32(const std::string& item) {
    need(4, item);
    uint32_t v = load<uint32_t>(data + pos);
    pos += 4;
    return v;
  }
  uint64_t u64(const std::string& item) {
    need(8, item);
    uint64_t v = load<uint64_t>(data + pos);
    pos += 8;
    return v;
  }
  std::string_view str(const std::string& item) {
    uint64_t n = u64(item + " length");
    if (n > left())
      fail("{}: {} has length {} at byte {}, but only {} bytes are left: truncated or corrupt", what, item, n, pos,
           left());
    std::string_view s((const char*)data + pos, (size_t)n);
    pos += (size_t)n;
    return s;
  }
};

bool valid_type(uint32_t t) { return t <= (uint32_t)GgufType::F64; }

GgufValue read_value(Cursor& c, GgufType type, const std::string& key) {
  GgufValue v;
  v.type = type;
  std::string item = "the value of '" + key + "'";
  if (type == GgufType::STRING) {
    v.str = c.str(item);
    return v;
  }
  if (type == GgufType::ARRAY) {
    uint32_t et = c.u32(item + " (array element type)");
    if (!valid_type(et)) fail("{}: key '{}' is an array of unknown value type {}", c.what, key, et);
    v.elem = (GgufType)et;
    if (v.elem == GgufType::ARRAY) fail("{}: key '{}' is an array of arrays, which GGUF readers do not accept", c.what, key);
    v.count = c.u64(item + " (array length)");
    if (v.elem == GgufType::STRING) {
      // Each string needs at least its 8-byte length: bound the count before reserving.
      if (v.count > c.left() / 8)
        fail("{}: key '{}' claims {} strings, more than the {} bytes left can hold: truncated or corrupt", c.what, key,
             v.count, c.left());
      v.strs.reserve((size_t)v.count);
      for (uint64_t k = 0; k < v.count; k++) v.strs.push_back(c.str(item + "[" + std::to_string(k) + "]"));
      return v;
    }
    uint64_t bytes;
    if (mul_overflows(v.count, scalar_size(v.elem), &bytes) || bytes > c.left())
      fail("{}: key '{}' claims {} elements of {}, more than the {} bytes left: truncated or corrupt", c.what, key,
           v.count, gguf_type_name(v.elem), c.left());
    v.items = c.data + c.pos;
    c.pos += (size_t)bytes;
    if (v.elem == GgufType::BOOL)
      for (uint64_t k = 0; k < v.count; k++)
        if (v.items[k] > 1) fail("{}: key '{}' element {} is not a boolean (byte {})", c.what, key, k, v.items[k]);
    return v;
  }
  size_t n = scalar_size(type);
  c.need(n, item);
  const uint8_t* p = c.data + c.pos;
  switch (type) {
    case GgufType::U8: v.u = p[0]; break;
    case GgufType::I8: v.i = (int8_t)p[0]; break;
    case GgufType::U16: v.u = load<uint16_t>(p); break;
    case GgufType::I16: v.i = load<int16_t>(p); break;
    case GgufType::U32: v.u = load<uint32_t>(p); break;
    case GgufType::I32: v.i = load<int32_t>(p); break;
    case GgufType::U64: v.u = load<uint64_t>(p); break;
    case GgufType::I64: v.i = load<int64_t>(p); break;
    case GgufType::F32: v.f = load<float>(p); break;
    case GgufType::F64: v.f = load<double>(p); break;
    case GgufType::BOOL:
      if (p[0] > 1) fail("{}: key '{}' is not a boolean (byte {})", c.what, key, p[0]);
      v.i = p[0];
      break;
    default: break;
  }
  c.pos += n;
  return v;
}

// ggml type ids (ggml.h enum ggml_type) that kvad reads, and the names of the rest for messages.
struct GgmlType {
  uint32_t id;
  const char* name;
  bool supported;
  DType dtype;
};
const GgmlType kGgmlTypes[] = {
    {0, "F32", true, DType::F32},       {1, "F16", true, DType::F16},       {2, "Q4_0", true, DType::Q4_0},
    {3, "Q4_1", true, DType::Q4_1},     {6, "Q5_0", true, DType::Q5_0},     {7, "Q5_1", true, DType::Q5_1},
    {8, "Q8_0", true, DType::Q8_0},     {9, "Q8_1", false, DType::F32},     {10, "Q2_K", false, DType::F32},
    {11, "Q3_K", false, DType::F32},    {12, "Q4_K", true, DType::Q4_K},    {13, "Q5_K", true, DType::Q5_K},
    {14, "Q6_K", true, DType::Q6_K},    {15, "Q8_K", false, DType::F32},    {16, "IQ2_XXS", false, DType::F32},
    {17, "IQ2_XS", false, DType::F32},  {18, "IQ3_XXS", false, DType::F32}, {19, "IQ1_S", false, DType::F32},
    {20, "IQ4_NL", false, DType::F32},  {21, "IQ3_S", false, DType::F32},   {22, "IQ2_S", false, DType::F32},
    {23, "IQ4_XS", false, DType::F32},  {24, "I8", false, DType::F32},      {25, "I16", false, DType::F32},
    {26, "I32", false, DType::F32},     {27, "I64", false, DType::F32},     {28, "F64", false, DType::F32},
    {29, "IQ1_M", false, DType::F32},   {30, "BF16", true, DType::BF16},    {34, "TQ1_0", false, DType::F32},
    {35, "TQ2_0", false, DType::F32},   {39, "MXFP4", false, DType::F32},   {40, "NVFP4", false, DType::F32},
    {41, "Q1_0", false, DType::F32},    {42, "Q2_0", false, DType::F32},
};

const GgmlType* ggml_type(uint32_t id) {
  for (const GgmlType& t : kGgmlTypes)
    if (t.id == id) return &t;
  return nullptr;
}

std::string supported_types() {
  std::string s;
  for (const GgmlType& t : kGgmlTypes)
    if (t.supported) s += (s.empty() ? "" : ", ") + std::string(t.name);
  return s;
}

}  // namespace

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::U8: return "u8";
    case GgufType::I8: return "i8";
    case GgufType::U16: return "u16";
    case GgufType::I16: return "i16";
    case GgufType::U32: return "u32";
    case GgufType::I32: return "i32";
    case GgufType::F32: return "f32";
    case GgufType::BOOL: return "bool";
    case GgufType::STRING: return "string";
    case GgufType::ARRAY: return "array";
    case GgufType::U64: return "u64";
    case GgufType::I64: return "i64";
    case GgufType::F64: return "f64";
  }
  return "?";
}

std::string ggml_type_name(uint32_t id) {
  const GgmlType* t = ggml_type(id);
  return t ? t->name : "type " + std::to_string(id);
}

bool GgufValue::is_int() const {
  switch (type) {
    case GgufType::U8: case GgufType::I8: case GgufType::U16: case GgufType::I16: case GgufType::U32:
    case GgufType::I32: case GgufType::U64: case GgufType::I64: return true;
    default: return false;
  }
}

int64_t GgufValue::int_at(uint64_t k) const {
  const uint8_t* p = items + k * scalar_size(elem);
  switch (elem) {
    case GgufType::U8: case GgufType::BOOL: return p[0];
    case GgufType::I8: return (int8_t)p[0];
    case GgufType::U16: return load<uint16_t>(p);
    case GgufType::I16: return load<int16_t>(p);
    case GgufType::U32: return load<uint32_t>(p);
    case GgufType::I32: return load<int32_t>(p);
    case GgufType::U64: {
      uint64_t u = load<uint64_t>(p);
      return u > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)u;
    }
    case GgufType::I64: return load<int64_t>(p);
    case GgufType::F32: return (int64_t)load<float>(p);
    case GgufType::F64: return (int64_t)load<double>(p);
    default: return 0;
  }
}

double GgufValue::float_at(uint64_t k) const {
  const uint8_t* p = items + k * scalar_size(elem);
  if (elem == GgufType::F32) return load<float>(p);
  if (elem == GgufType::F64) return load<double>(p);
  return (double)int_at(k);
}

bool GgufFile::maps(const void* p, size_t n) const { return map_ && map_->maps(p, n); }

void GgufCheckpoint::release(const TensorView& t) const {
  if (file_->maps(t.data, t.nbytes)) release_mapped_pages(t.data, t.nbytes);
}

GgufFile::GgufFile(const std::string& path) : map_(std::make_unique<MappedFile>(path)), what_(path) {
  parse(map_->data(), map_->size());
}

GgufFile::GgufFile(const uint8_t* data, size_t size, const std::string& what) : what_(what) { parse(data, size); }

void GgufFile::parse(const uint8_t* data, size_t size) {
  static const uint8_t kEmpty[1] = {0};
  if (!data) data = kEmpty;  // an empty file maps to nothing
  Cursor c{data, size, 0, what_};
  if (size < 4 || load<uint32_t>(data) != kMagic) {
    std::string got;
    for (size_t i = 0; i < std::min<size_t>(size, 4); i++)
      got += (data[i] >= 32 && data[i] < 127) ? std::string(1, (char)data[i]) : fmt::format("\\x{:02x}", data[i]);
    fail("{}: not a GGUF file (starts with '{}', expected 'GGUF')", what_, got);
  }
  c.pos = 4;
  version_ = c.u32("the version");
  if (version_ == 1) fail("{}: GGUF version 1 is not supported (only versions 2 and 3); re-convert the model", what_);
  if (version_ != 2 && version_ != 3) {
    if ((version_ & 0xffff) == 0)
      fail("{}: GGUF version {} looks byte-swapped: a big-endian file? (only little-endian versions 2 and 3 are read)",
           what_, version_);
    fail("{}: unsupported GGUF version {} (only versions 2 and 3)", what_, version_);
  }
  uint64_t n_tensors = c.u64("the tensor count"), n_kv = c.u64("the metadata count");
  // Lower bounds on the bytes each entry takes keep absurd counts from reserving memory.
  if (n_kv > c.left() / 13)
    fail("{}: header claims {} metadata entries, more than the {} bytes of the file can hold: corrupt", what_, n_kv,
         c.left());
  if (n_tensors > c.left() / 24)
    fail("{}: header claims {} tensors, more than the {} bytes of the file can hold: corrupt", what_, n_tensors,
         c.left());

  kv_.reserve((size_t)n_kv);
  for (uint64_t k = 0; k < n_kv; k++) {
    std::string key(c.str("metadata key " + std::to_string(k)));
    if (key.empty()) fail("{}: metadata key {} is empty", what_, k);
    if (kv_index_.count(key)) fail("{}: metadata key '{}' appears twice", what_, key);
    uint32_t t = c.u32("the type of '" + key + "'");
    if (!valid_type(t)) fail("{}: key '{}' has unknown value type {}", what_, key, t);
    GgufValue v = read_value(c, (GgufType)t, key);
    kv_index_.emplace(key, kv_.size());
    kv_.emplace_back(std::move(key), std::move(v));
  }

  if (const GgufValue* a = find("general.alignment")) {
    if (a->type != GgufType::U32)
      fail("{}: general.alignment must be a u32, is {}", what_, gguf_type_name(a->type));
    if (a->u == 0 || (a->u & (a->u - 1)) != 0)
      fail("{}: general.alignment = {} is not a power of two", what_, a->u);
    alignment_ = a->u;
  }

  tensors_.reserve((size_t)n_tensors);
  for (uint64_t k = 0; k < n_tensors; k++) {
    GgufTensorInfo t;
    t.name = std::string(c.str("the name of tensor " + std::to_string(k)));
    if (t.name.empty()) fail("{}: tensor {} has an empty name", what_, k);
    if (t.name.size() >= kMaxName)
      fail("{}: tensor {} has a name of {} bytes (at most {})", what_, k, t.name.size(), kMaxName - 1);
    if (tensor_index_.count(t.name)) fail("{}: tensor '{}' appears twice", what_, t.name);
    std::string where = what_ + ": tensor '" + t.name + "'";
    uint32_t n_dims = c.u32("the dimension count of '" + t.name + "'");
    if (n_dims == 0 || n_dims > (uint32_t)kMaxDims) fail("{} has {} dimensions (1 to {} supported)", where, n_dims, kMaxDims);
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
      uint64_t ne = c.u64("a dimension of '" + t.name + "'");
      if (ne == 0 || ne > (uint64_t)INT64_MAX) fail("{} has dimension {} = {}: must be positive", where, d, (int64_t)ne);
      if (mul_overflows(numel, ne, &numel) || numel > (uint64_t)INT64_MAX)
        fail("{}: its shape overflows a 64-bit element count", where);
      t.ne.push_back((int64_t)ne);
    }
    t.ggml_type = c.u32("the type of '" + t.name + "'");
    const GgmlType* gt = ggml_type(t.ggml_type);
    if (!gt) fail("{} has unknown ggml type {} (supported: {})", where, t.ggml_type, supported_types());
    if (!gt->supported)
      fail("{} has type {}, which kvad does not read (supported: {}); use a file quantised to one of those", where,
           gt->name, supported_types());
    t.dtype = gt->dtype;
    t.offset = c.u64("the offset of '" + t.name + "'");
    int64_t blk = dtype_block_elems(t.dtype);
    if (t.ne[0] % blk != 0)
      fail("{}: its rows of {} values are not whole {} blocks of {}", where, t.ne[0], gt->name, blk);
    uint64_t bytes;
    if (mul_overflows(numel / (uint64_t)blk, dtype_block_bytes(t.dtype), &bytes)) fail("{}: its byte size overflows", where);
    t.nbytes = (size_t)bytes;
    if (t.offset % alignment_ != 0)
      fail("{}: data offset {} is not a multiple of the alignment {}", where, t.offset, alignment_);
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment.
  uint64_t start = c.pos, rem = start % alignment_;
  if (rem && add_overflows(start, alignment_ - rem, &start)) fail("{}: data section offset overflows", what_);
  if (!tensors_.empty() && start > size)
    fail("{}: truncated: the data section would start at byte {} but the file has {}", what_, start, size);
  uint64_t data_size = tensors_.empty() ? 0 : size - start;
  for (GgufTensorInfo& t : tensors_) {
    uint64_t end;
    if (add_overflows(t.offset, t.nbytes, &end) || end > data_size)
      fail("{}: tensor '{}' ({} bytes at data offset {}) runs past the end of the file ({} data bytes): truncated or "
           "corrupt",
           what_, t.name, t.nbytes, t.offset, data_size);
    t.data = data + start + t.offset;
  }
  std::vector<const GgufTensorInfo*> order;
  for (const GgufTensorInfo& t : tensors_) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < order.size(); i++)
    if (order[i]->offset < order[i - 1]->offset + order[i - 1]->nbytes)
      fail("{}: tensors '{}' and '{}' overlap in the data section", what_, order[i - 1]->name, order[i]->name);
}

const GgufTensorInfo* GgufFile::tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

std::optional<std::string> GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::STRING) fail("{}: metadata '{}' must be a string, is {}", what_, key, gguf_type_name(v->type));
  return std::string(v->str);
}

std::optional<int64_t> GgufFile::get_int(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_int()) fail("{}: metadata '{}' must be an integer, is {}", what_, key, gguf_type_name(v->type));
  if (v->type == GgufType::U8 || v->type == GgufType::U16 || v->type == GgufType::U32 || v->type == GgufType::U64) {
    if (v->u > (uint64_t)INT64_MAX) fail("{}: metadata '{}' = {} is out of range", what_, key, v->u);
    return (int64_t)v->u;
  }
  return v->i;
}

std::optional<double> GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->is_float()) return v->f;
  if (v->is_int()) return (double)*get_int(key);
  fail("{}: metadata '{}' must be a number, is {}", what_, key, gguf_type_name(v->type));
}

std::optional<bool> GgufFile::get_bool(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::BOOL) fail("{}: metadata '{}' must be a bool, is {}", what_, key, gguf_type_name(v->type));
  return v->i != 0;
}

const std::vector<std::string_view>* GgufFile::get_string_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return nullptr;
  if (v->type != GgufType::ARRAY || v->elem != GgufType::STRING)
    fail("{}: metadata '{}' must be an array of strings", what_, key);
  return &v->strs;
}

std::optional<std::vector<int64_t>> GgufFile::get_int_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::ARRAY || v->elem == GgufType::STRING || v->elem == GgufType::F32 || v->elem == GgufType::F64)
    fail("{}: metadata '{}' must be an array of integers", what_, key);
  std::vector<int64_t> out((size_t)v->count);
  for (uint64_t k = 0; k < v->count; k++) out[(size_t)k] = v->int_at(k);
  return out;
}

// ------------------------------------------------------------------------------------------------
// Checkpoint view

void gguf_unpermute_rows(const uint8_t* src, uint8_t* dst, int64_t rows, size_t row_bytes, int64_t n_head) {
  // convert_hf_to_gguf.py: w.reshape(n_head, 2, half, ...).swapaxes(1, 2): GGUF row h*hd + 2i + j
  // holds HF row h*hd + j*half + i.
  int64_t hd = rows / n_head, half = hd / 2;
  for (int64_t h = 0; h < n_head; h++)
    for (int64_t i = 0; i < half; i++)
      for (int64_t j = 0; j < 2; j++)
        std::memcpy(dst + (size_t)(h * hd + j * half + i) * row_bytes, src + (size_t)(h * hd + 2 * i + j) * row_bytes,
                    row_bytes);
}

GgufCheckpoint::GgufCheckpoint(std::shared_ptr<const GgufFile> file, const GgufNameMap& names)
    : file_(std::move(file)) {
  build(names);
}

namespace {

// llama.cpp permuted this Q/K weight or bias per head; returns HF row order in a copy.
std::shared_ptr<std::vector<uint8_t>> unpermuted_copy(const GgufFile& f, const GgufTensorInfo& t, int64_t heads) {
  bool bias = t.name.ends_with(".bias");
  if ((bias && t.ne.size() != 1) || (!bias && t.ne.size() != 2))
    fail("{}: tensor '{}' has {} dimensions, expected {}", f.what(), t.name, t.ne.size(), bias ? 1 : 2);
  int64_t rows = bias ? t.ne[0] : t.ne[1];
  if (heads <= 0 || rows % (2 * heads) != 0)
    fail("{}: tensor '{}' has {} rows, not a whole number of {} heads of even size (attention.head_count)", f.what(),
         t.name, rows, heads);
  if (bias && dtype_is_block(t.dtype))
    fail("{}: tensor '{}' is a 1-D {} tensor; biases must be F32, F16 or BF16", f.what(), t.name, dtype_name(t.dtype));
  auto buf = std::make_shared<std::vector<uint8_t>>(t.nbytes);
  gguf_unpermute_rows(t.data, buf->data(), rows, t.nbytes / (size_t)rows, heads);
  return buf;
}

}  // namespace

void GgufCheckpoint::build(const GgufNameMap& names) {
  const GgufFile& f = *file_;
  description_ = f.what();
  arch_ = f.get_string("general.architecture").value_or("");
  if (arch_.empty()) fail("{}: no general.architecture in the GGUF metadata", f.what());
  for (const GgufTensorInfo& t : f.tensors()) {
    auto mapped = names.find(t.name);
    if (mapped != names.end() && !mapped->second.experts.empty()) {
      add_expert_slices(t, mapped->second.experts);
      continue;
    }
    TensorView v;
    v.name = mapped == names.end() ? t.name : mapped->second.hf;  // unknown: kept, so the guard names it
    v.dtype = t.dtype;
    v.shape.assign(t.ne.rbegin(), t.ne.rend());
    v.data = t.data;
    v.nbytes = t.nbytes;
    v.file = f.what() + " (" + t.name + ")";
    if (mapped != names.end() && mapped->second.conv1d && t.ne.size() == 2) {
      v.shape = {t.ne[0], t.ne[1]};  // HF Conv1D says [in, out]; GGUF stores [out][in]
      v.transposed = true;
    }
    if (mapped != names.end() && mapped->second.unpermute_heads != 0) {
      owned_.push_back(unpermuted_copy(f, t, mapped->second.unpermute_heads));
      v.data = owned_.back()->data();
    }
    std::string name = v.name;
    if (!views_.emplace(name, std::move(v)).second)
      fail("{}: two tensors are both '{}' once named as kvad reads them (one is '{}')", f.what(), name, t.name);
  }
}

void GgufCheckpoint::add_expert_slices(const GgufTensorInfo& t, const std::vector<std::string>& experts) {
  const GgufFile& f = *file_;
  const int64_t E = (int64_t)experts.size();
  if (t.ne.size() != 3 || t.ne[2] != E)
    fail("{}: tensor '{}' should hold {} experts as [{}, rows, cols], has shape [{}]", f.what(), t.name, E, E,
         fmt::join(t.ne.rbegin(), t.ne.rend(), ", "));
  const size_t slice = t.nbytes / (size_t)E;  // whole rows per expert, so whole quantisation blocks too
  for (int64_t e = 0; e < E; e++) {
    TensorView v;
    v.name = experts[(size_t)e];
    v.dtype = t.dtype;
    v.shape = {t.ne[1], t.ne[0]};
    v.data = t.data + slice * (size_t)e;
    v.nbytes = slice;
    v.file = fmt::format("{} ({}, expert {})", f.what(), t.name, e);
    if (v.name.empty()) fail("{}: tensor '{}' has a slice {} the model does not read", f.what(), t.name, e);
    std::string name = v.name;
    if (!views_.emplace(name, std::move(v)).second)
      fail("{}: two tensors are both '{}' once named as kvad reads them (one is '{}')", f.what(), name, t.name);
  }
}

void GgufCheckpoint::add_derived(TensorView v, std::shared_ptr<std::vector<uint8_t>> bytes) {
  v.data = bytes->data();
  v.nbytes = bytes->size();
  owned_.push_back(std::move(bytes));
  std::string name = v.name;
  if (!views_.emplace(name, std::move(v)).second)
    fail("{}: a tensor '{}' is in the file and also built from others", file_->what(), name);
}

std::vector<std::string> GgufCheckpoint::names() const {
  std::vector<std::string> n;
  for (const auto& [k, v] : views_) n.push_back(k);
  return n;
}

const TensorView* GgufCheckpoint::lookup(const std::string& name) const {
  auto it = views_.find(name);
  return it == views_.end() ? nullptr : &it->second;
}

// ------------------------------------------------------------------------------------------------
// Tokenizer

namespace {

// HF tokenizer.json pre-tokenizers of the byte-level BPE families, by llama.cpp's pre name.
const char* kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!"
    "\\S)|\\s+";
const char* kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";

enum class Pre { Qwen2, Llama3, Gpt2, SmolLM };

Pre pre_type(const std::string& pre, const std::string& what) {
  // The names llama.cpp (llama-vocab.cpp) maps to these four pre-tokenizers.
  for (const char* n : {"qwen2", "deepseek-r1-qwen"})
    if (pre == n) return Pre::Qwen2;
  for (const char* n : {"llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral"})
    if (pre == n) return Pre::Llama3;
  for (const char* n : {"gpt-2", "phi-2", "roberta-bpe"})
    if (pre == n) return Pre::Gpt2;
  if (pre == "smollm") return Pre::SmolLM;
  if (pre.empty() || pre == "default")
    fail("{}: the GGUF tokenizer has no pre-tokenizer name (tokenizer.ggml.pre), so its splitting rule is unknown; "
         "supported: qwen2, llama-bpe (llama3), gpt-2, smollm",
         what);
  fail("{}: tokenizer.ggml.pre '{}' is not supported (supported: qwen2, llama-bpe (llama3), gpt-2, smollm)", what, pre);
}

Json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", use_regex}};
}

Json split(const char* re) {
  return {{"type", "Split"}, {"pattern", {{"Regex", re}}}, {"behavior", "Isolated"}, {"invert", false}};
}

bool is_eog_text(std::string_view t) {
  for (const char* s : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>",
                        "<|end_of_text|>"})
    if (t == s) return true;
  return false;
}

}  // namespace

GgufTokenizerParts gguf_tokenizer(const GgufFile& f) {
  const std::string& what = f.what();
  std::string model = f.get_string("tokenizer.ggml.model").value_or("");
  if (model.empty()) fail("{}: no tokenizer in the GGUF file (tokenizer.ggml.model is missing)", what);
  if (model != "gpt2")
    fail("{}: tokenizer.ggml.model '{}' is not supported: kvad reads byte-level BPE tokenizers ('gpt2')", what, model);
  const std::vector<std::string_view>* tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (!tokens || tokens->empty()) fail("{}: tokenizer.ggml.tokens is missing or empty", what);
  // The tokenizer's id bound (2^24, tokenizer_json.h): more ids than the tokenizer accepts.
  if (tokens->size() > ((size_t)1 << 24)) fail("{}: {} tokens is too many (at most 2^24)", what, tokens->size());
  const std::vector<std::string_view>* merges = f.get_string_array("tokenizer.ggml.merges");
  if (!merges) fail("{}: tokenizer.ggml.merges is missing (a BPE tokenizer needs its merges)", what);
  std::vector<int64_t> types;
  if (auto t = f.get_int_array("tokenizer.ggml.token_type")) {
    if (t->size() != tokens->size())
      fail("{}: tokenizer.ggml.token_type has {} entries for {} tokens", what, t->size(), tokens->size());
    types = std::move(*t);
  }
  Pre pre = pre_type(f.get_string("tokenizer.ggml.pre").value_or(""), what);

  // llama.cpp token types: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
  Json added = Json::array();
  GgufTokenizerParts out;
  out.vocab.reserve(tokens->size());
  for (size_t id = 0; id < tokens->size(); id++) {
    std::string_view tok = (*tokens)[id];
    int64_t type = types.empty() ? 1 : types[id];
    if (type == 5) continue;  // [PADn] fillers of ids the original tokenizer did not define
    if (type == 3 || type == 4) {
      if (tok.empty()) continue;
      added.push_back({{"id", id}, {"content", tok}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                       {"normalized", false}, {"special", type == 3}});
      if (type == 3 && is_eog_text(tok)) out.end_of_generation.push_back((int32_t)id);
      continue;
    }
    out.vocab.emplace_back(tok, (int32_t)id);
  }
  out.merges = *merges;

  Json tj = Json::object();
  tj["version"] = "1.0";
  tj["truncation"] = nullptr;
  tj["padding"] = nullptr;
  tj["added_tokens"] = added;
  tj["normalizer"] = pre == Pre::Qwen2 ? Json{{"type", "NFC"}} : Json();
  switch (pre) {
    case Pre::Qwen2:
      tj["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {split(kQwen2Regex), byte_level(false)}}};
      break;
    case Pre::Llama3:
      tj["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {split(kLlama3Regex), byte_level(false)}}};
      break;
    case Pre::Gpt2: tj["pre_tokenizer"] = byte_level(true); break;
    case Pre::SmolLM:
      tj["pre_tokenizer"] = {{"type", "Sequence"},
                             {"pretokenizers",
                              {{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true)}}};
      break;
  }
  tj["decoder"] = byte_level(true);
  tj["model"] = {{"type", "BPE"},           {"dropout", nullptr},       {"unk_token", nullptr},
                 {"continuing_subword_prefix", ""}, {"end_of_word_suffix", ""}, {"fuse_unk", false},
                 {"byte_fallback", false},  {"ignore_merges", pre == Pre::Llama3}};

  // Special tokens and what encode(add_special) adds, as llama.cpp reads them.
  Json cfg = Json::object();
  auto token_of = [&](const char* key, std::string* text) -> std::optional<int64_t> {
    auto v = f.get_int(key);
    if (!v || *v < 0 || (size_t)*v >= tokens->size()) return std::nullopt;
    *text = std::string((*tokens)[(size_t)*v]);
    return v;
  };
  std::string bos_text, eos_text;
  auto bos = token_of("tokenizer.ggml.bos_token_id", &bos_text);
  auto eos = token_of("tokenizer.ggml.eos_token_id", &eos_text);
  if (bos) cfg["bos_token"] = bos_text;
  if (eos) cfg["eos_token"] = eos_text;
  // llama.cpp's default: the llama3 pre-tokenizer adds BOS, the others do not.
  bool add_bos = f.get_bool("tokenizer.ggml.add_bos_token").value_or(pre == Pre::Llama3);
  bool add_eos = f.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  Json single = Json::array(), specials = Json::object();
  if (add_bos && bos) {
    single.push_back({{"SpecialToken", {{"id", bos_text}, {"type_id", 0}}}});
    specials[bos_text] = {{"id", bos_text}, {"ids", {*bos}}, {"tokens", {bos_text}}};
  }
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  if (add_eos && eos) {
    single.push_back({{"SpecialToken", {{"id", eos_text}, {"type_id", 0}}}});
    specials[eos_text] = {{"id", eos_text}, {"ids", {*eos}}, {"tokens", {eos_text}}};
  }
  tj["post_processor"] = {{"type", "TemplateProcessing"}, {"single", single}, {"pair", Json::array()},
                          {"special_tokens", specials}};
  if (auto t = f.get_string("tokenizer.chat_template")) cfg["chat_template"] = *t;
  for (const char* k : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"})
    if (auto v = f.get_int(k); v && *v >= 0 && (size_t)*v < tokens->size()) out.end_of_generation.push_back((int32_t)*v);
  std::sort(out.end_of_generation.begin(), out.end_of_generation.end());
  out.end_of_generation.erase(std::unique(out.end_of_generation.begin(), out.end_of_generation.end()),
                              out.end_of_generation.end());
  out.tokenizer = std::move(tj);
  out.config = std::move(cfg);
  return out;
}

}  // namespace kvad
