#include "io/safetensors.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"

namespace kvad {

static bool parse_dtype(const std::string& s, DType* out) {
  static const std::pair<const char*, DType> table[] = {
      {"F32", DType::F32}, {"F16", DType::F16}, {"BF16", DType::BF16}, {"I32", DType::I32},
      {"I64", DType::I64}, {"U8", DType::U8},   {"I8", DType::I8},     {"F64", DType::F64},
      {"BOOL", DType::BOOL}, {"F8_E4M3", DType::F8_E4M3}};
  for (auto& [name, t] : table)
    if (s == name) {
      *out = t;
      return true;
    }
  return false;
}

std::vector<TensorView> SafetensorsFile::parse(const uint8_t* data, size_t size, const std::string& what) {
  if (size < 8) fail("{}: not a safetensors file (only {} bytes, need an 8-byte header length)", what, size);
  uint64_t hlen;
  std::memcpy(&hlen, data, 8);  // little-endian on every target we build for
  if (hlen > size - 8)
    fail("{}: header length {} runs past the end of the file ({} bytes): truncated or not safetensors", what, hlen,
         size);
  if (hlen > (100u << 20)) fail("{}: header length {} is implausibly large", what, hlen);
  std::string_view header((const char*)data + 8, hlen);
  Json h = parse_json(header, what + " (header)");
  if (!h.is_object()) fail("{}: header is not a JSON object", what);
  const uint8_t* base = data + 8 + hlen;
  uint64_t data_size = size - 8 - hlen;
  std::vector<TensorView> out;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      if (!it->is_object()) fail("{}: __metadata__ must be an object", what);
      continue;
    }
    const Json& e = *it;
    if (name.size() > 1024) fail("{}: a tensor name of {} bytes (at most 1024): corrupt header", what, name.size());
    std::string where = what + ": tensor '" + name + "'";
    if (!e.is_object()) fail("{}: entry is not an object", where);
    auto dt = e.find("dtype");
    if (dt == e.end() || !dt->is_string()) fail("{}: missing or non-string dtype", where);
    TensorView t;
    t.name = name;
    t.file = what;
    if (!parse_dtype(dt->get<std::string>(), &t.dtype))
      fail("{}: unknown dtype '{}' (supported: F32, F16, BF16, F8_E4M3, I32, I64, U8, I8, F64, BOOL)", where,
           dt->get<std::string>());
    auto sh = e.find("shape");
    if (sh == e.end() || !sh->is_array()) fail("{}: missing or non-array shape", where);
    if (sh->size() > 8) fail("{}: {} dimensions is too many", where, sh->size());
    uint64_t numel = 1;
    for (const Json& d : *sh) {
      if (!d.is_number_unsigned()) fail("{}: shape entries must be non-negative integers, got {}", where, json_snippet(d));
      uint64_t v = d.get<uint64_t>();
      if (mul_overflows(numel, v, &numel)) fail("{}: shape overflows", where);
      t.shape.push_back((int64_t)v);
    }
    if (numel > (uint64_t)INT64_MAX) fail("{}: shape overflows", where);
    auto off = e.find("data_offsets");
    if (off == e.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned())
      fail("{}: data_offsets must be [begin, end] with non-negative integers", where);
    uint64_t b = (*off)[0].get<uint64_t>(), en = (*off)[1].get<uint64_t>();
    if (b > en || en > data_size)
      fail("{}: data_offsets [{}, {}] out of bounds (data section is {} bytes): truncated or corrupt file", where, b,
           en, data_size);
    uint64_t want;
    if (mul_overflows(numel, dtype_size(t.dtype), &want) || want != en - b)
      fail("{}: shape {} x {} needs {} bytes but data_offsets span {}", where, t.shape_str(), dtype_name(t.dtype),
           want, en - b);
    t.data = base + b;
    t.nbytes = (size_t)(en - b);
    out.push_back(std::move(t));
  }
  // Non-overlapping: sort by start; each must start at or after the previous end.
  std::vector<const TensorView*> order;
  for (auto& t : out) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->data < b->data; });
  for (size_t i = 1; i < order.size(); i++)
    if (order[i]->data < order[i - 1]->data + order[i - 1]->nbytes)
      fail("{}: tensors '{}' and '{}' overlap in the data section", what, order[i - 1]->name, order[i]->name);
  return out;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : map_(std::make_unique<MappedFile>(path)) {
  tensors_ = parse(map_->data(), map_->size(), path);
}

SafetensorsCheckpoint::SafetensorsCheckpoint(const std::string& dir)
    : SafetensorsCheckpoint(dir, "model.safetensors", "model.safetensors.index.json") {}

SafetensorsCheckpoint::SafetensorsCheckpoint(const std::string& dir, const std::string& single_name,
                                             const std::string& index_name) {
  std::string single = join_path(dir, single_name);
  std::string index = join_path(dir, index_name);
  if (file_exists(index)) {
    description_ = index;
    Json j = read_json_file(index);
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      fail("{}: missing 'weight_map' object", index);
    std::map<std::string, std::vector<std::string>> by_file;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it->is_string()) fail("{}: weight_map['{}'] must be a file name", index, it.key());
      std::string f = it->get<std::string>();
      if (f.find('/') != std::string::npos || f == "..")
        fail("{}: weight_map['{}'] = '{}' is not a plain file name", index, it.key(), f);
      by_file[f].push_back(it.key());
    }
    if (by_file.empty()) fail("{}: weight_map is empty", index);
    for (auto& [f, names] : by_file) {
      files_.push_back(std::make_unique<SafetensorsFile>(join_path(dir, f)));
      for (const TensorView& t : files_.back()->tensors()) by_name_.emplace(t.name, &t);
      for (const std::string& n : names)
        if (!by_name_.count(n)) fail("{}: lists tensor '{}' in {}, which does not contain it", index, n, f);
    }
  } else if (file_exists(single)) {
    description_ = single;
    files_.push_back(std::make_unique<SafetensorsFile>(single));
    for (const TensorView& t : files_.back()->tensors()) by_name_.emplace(t.name, &t);
  } else {
    fail("{}: no {} or {} in this folder", dir, single_name, index_name);
  }
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> n;
  for (auto& [k, v] : by_name_) n.push_back(k);
  std::sort(n.begin(), n.end());
  return n;
}

std::vector<std::string> SafetensorsCheckpoint::files() const {
  std::vector<std::string> f;
  for (auto& file : files_) f.push_back(file->path());
  return f;
}

// Only the files' own pages: a converted copy's heap bytes are not this checkpoint's to drop.
void SafetensorsCheckpoint::release(const TensorView& t) const {
  for (const auto& file : files_)
    if (file->maps(t.data, t.nbytes)) return release_mapped_pages(t.data, t.nbytes);
}

const TensorView* SafetensorsCheckpoint::lookup(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

static uint64_t spec_bytes(const TensorToWrite& t) {
  uint64_t n = dtype_size(t.dtype);
  for (int64_t d : t.shape) n *= (uint64_t)d;
  return n;
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& specs,
                       const std::function<std::string(size_t)>& produce) {
  Json h = Json::object();
  h["__metadata__"] = {{"format", "pt"}};
  uint64_t off = 0;
  for (const auto& t : specs) {
    uint64_t n = spec_bytes(t);
    h[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {off, off + n}}};
    off += n;
  }
  std::string hs = h.dump();
  while (hs.size() % 8) hs += ' ';
  uint64_t hl = hs.size();
  AtomicFile f(path);
  f.write(std::string_view((const char*)&hl, 8));
  f.write(hs);
  for (size_t i = 0; i < specs.size(); i++) {
    std::string bytes = produce(i);
    if (bytes.size() != spec_bytes(specs[i]))
      fail("write_safetensors: tensor '{}' has {} bytes, its shape needs {}", specs[i].name, bytes.size(),
           spec_bytes(specs[i]));
    f.write(bytes);
  }
  f.commit();
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors) {
  write_safetensors(path, tensors, [&](size_t i) { return tensors[i].bytes; });
}

}  // namespace kvad
