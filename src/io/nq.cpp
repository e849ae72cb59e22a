#include "io/nq.h"

#include <algorithm>
#include <cstring>

#include "core/checksum.h"
#include "core/error.h"
#include "core/fs.h"

namespace kvad {

static const char kMagic[8] = {'K', 'V', 'A', 'D', 'N', 'Q', '\0', '\1'};
// 2: every tensor entry carries "xxh64", the checksum of its bytes (version 1 caches had none
// and are rebuilt).
static constexpr int kNqVersion = 2;

size_t packed_bytes(DType dtype, int64_t rows, int64_t cols) {
  size_t rec = dtype == DType::KQ8 ? 544 : 320;
  return (size_t)((rows + 15) / 16) * (size_t)((cols + 31) / 32) * rec;
}

void NqWriter::add(const std::string& name, DType dtype, std::vector<int64_t> shape, const uint8_t* data,
                   size_t bytes) {
  entries_.push_back({name, "", dtype, std::move(shape), data, bytes});
}

void NqWriter::alias(const std::string& name, const std::string& of) {
  entries_.push_back({name, of, DType::F32, {}, nullptr, 0});
}

void NqWriter::write(const std::string& path, const Json& stamp) const {
  Json tensors = Json::object();
  uint64_t off = 64;  // the magic, padded
  for (const Entry& e : entries_) {
    if (!e.alias_of.empty()) {
      tensors[e.name] = {{"alias_of", e.alias_of}};
      continue;
    }
    tensors[e.name] = {{"dtype", dtype_name(e.dtype)}, {"shape", e.shape}, {"offset", off}, {"bytes", e.bytes},
                       {"xxh64", hex64(xxh64(e.data, e.bytes))}};
    off += (e.bytes + 63) / 64 * 64;
  }
  Json header = {{"kvad_nq", kNqVersion}, {"stamp", stamp}, {"tensors", tensors}};
  remove_stale_temp_files(path);  // a writer killed mid-write left its temp behind
  AtomicFile f(path);
  std::string pad(64, '\0');
  f.write(std::string_view(kMagic, 8));
  f.write(std::string_view(pad.data(), 56));
  for (const Entry& e : entries_) {
    if (!e.alias_of.empty()) continue;
    f.write(std::string_view((const char*)e.data, e.bytes));
    f.write(std::string_view(pad.data(), (64 - e.bytes % 64) % 64));
  }
  std::string h = header.dump();
  f.write(h);
  f.write(std::string_view((const char*)&off, 8));
  f.commit();
}

namespace {

struct Parsed {
  Json header;
  std::vector<TensorView> tensors;
  std::vector<uint64_t> sums;  // xxh64 of each tensor's bytes
  std::vector<std::pair<std::string, std::string>> aliases;
};

DType parse_nq_dtype(const std::string& s, const std::string& where) {
  if (s == "KVAD_Q8") return DType::KQ8;
  if (s == "KVAD_Q4") return DType::KQ4;
  if (s == "F32") return DType::F32;
  if (s == "U8") return DType::U8;  // bytes in a backend's own layout (the GPU cache, vulkan_backend.cpp)
  fail("{}: unknown dtype '{}'", where, s);
}

Parsed parse(const uint8_t* data, size_t size, const std::string& what) {
  if (size < 80 || std::memcmp(data, kMagic, 8) != 0) fail("{}: not a kvad .nq cache file (bad magic or too short)", what);
  uint64_t hoff;
  std::memcpy(&hoff, data + size - 8, 8);
  if (hoff < 64 || hoff > size - 8) fail("{}: header offset {} out of range: truncated or corrupt", what, hoff);
  Parsed p;
  p.header = parse_json(std::string_view((const char*)data + hoff, size - 8 - hoff), what + " (header)");
  if (!p.header.is_object() || !p.header.contains("kvad_nq") || !p.header["kvad_nq"].is_number_integer())
    fail("{}: header is not a kvad .nq header", what);
  if (p.header["kvad_nq"].get<int64_t>() != kNqVersion)
    fail("{}: a version {} cache (this build writes version {}, with checksums)", what,
         json_snippet(p.header["kvad_nq"]), kNqVersion);
  if (!p.header.contains("tensors") || !p.header["tensors"].is_object() || !p.header.contains("stamp"))
    fail("{}: header is not a kvad .nq v{} header", what, kNqVersion);
  for (auto it = p.header["tensors"].begin(); it != p.header["tensors"].end(); ++it) {
    std::string where = what + ": tensor '" + it.key() + "'";
    const Json& e = *it;
    if (!e.is_object()) fail("{}: entry is not an object", where);
    if (e.contains("alias_of")) {
      if (!e["alias_of"].is_string()) fail("{}: alias_of must be a string", where);
      p.aliases.push_back({it.key(), e["alias_of"].get<std::string>()});
      continue;
    }
    TensorView t;
    t.name = it.key();
    t.file = what;
    if (!e.contains("dtype") || !e["dtype"].is_string()) fail("{}: missing dtype", where);
    t.dtype = parse_nq_dtype(e["dtype"].get<std::string>(), where);
    if (!e.contains("shape") || !e["shape"].is_array() || e["shape"].empty() || e["shape"].size() > 2)
      fail("{}: shape must have 1 or 2 dimensions", where);
    for (const Json& d : e["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (1ull << 32)) fail("{}: bad shape entry {}", where, json_snippet(d));
      t.shape.push_back(d.get<int64_t>());
    }
    if (!e.contains("offset") || !e["offset"].is_number_unsigned() || !e.contains("bytes") ||
        !e["bytes"].is_number_unsigned())
      fail("{}: offset and bytes must be non-negative integers", where);
    uint64_t off = e["offset"], bytes = e["bytes"];
    if (off < 64 || off % 64 || off > hoff || bytes > hoff - off)
      fail("{}: data range [{}, +{}) outside the data section: truncated or corrupt", where, off, bytes);
    size_t want = t.dtype == DType::F32 ? (size_t)t.numel() * 4
                  : t.dtype == DType::U8  ? (size_t)t.numel()
                  : t.shape.size() == 2 ? packed_bytes(t.dtype, t.shape[0], t.shape[1])
                                        : (size_t)-1;
    if (want != bytes) fail("{}: {} bytes, but its shape needs {}", where, bytes, want);
    auto sum = e.find("xxh64");
    if (sum == e.end() || !sum->is_string() || sum->get_ref<const std::string&>().size() != 16 ||
        sum->get_ref<const std::string&>().find_first_not_of("0123456789abcdef") != std::string::npos)
      fail("{}: missing or malformed checksum (xxh64)", where);
    t.data = data + off;
    t.nbytes = (size_t)bytes;
    p.sums.push_back(std::stoull(sum->get<std::string>(), nullptr, 16));
    p.tensors.push_back(std::move(t));
  }
  return p;
}

}  // namespace

static void verify(const TensorView& t, uint64_t sum, const std::string& what) {
  uint64_t got = xxh64(t.data, t.nbytes);
  if (got != sum)
    fail("{}: tensor '{}' fails its checksum (xxh64 {} recorded, {} found): the cache file is corrupt", what, t.name,
         hex64(sum), hex64(got));
}

void NqCheckpoint::validate(const uint8_t* data, size_t size, const std::string& what) {
  Parsed p = parse(data, size, what);
  for (size_t i = 0; i < p.tensors.size(); i++) verify(p.tensors[i], p.sums[i], what);
}

NqCheckpoint::NqCheckpoint(const std::string& path, const Json& expected_stamp, Paging paging) {
  description_ = path;
  remove_stale_temp_files(path);
  map_ = std::make_unique<MappedFile>(path);
  Parsed p = parse(map_->data(), map_->size(), path);
  if (p.header["stamp"] != expected_stamp) throw NqStale(path + ": made from a different checkpoint or build");
  // The stamp matches, so these are the weights a decode streams every token: held in huge pages
  // from here on (core/mmap_file.h), the mapping only told whether the file is the right one.
  if (paging == Paging::HugePages) {
    map_ = std::make_unique<MappedFile>(path, Paging::HugePages);
    p = parse(map_->data(), map_->size(), path);
  }
  const Json& names = expected_stamp.at("tensors");
  for (const Json& n : names) names_.push_back(n.get<std::string>());
  std::sort(names_.begin(), names_.end());
  for (size_t i = 0; i < p.tensors.size(); i++) {
    std::string name = p.tensors[i].name;
    cached_.emplace(name, Entry{std::move(p.tensors[i]), p.sums[i], false});
  }
  for (auto& [name, of] : p.aliases) {
    if (!cached_.count(of)) fail("{}: alias '{}' points at '{}', which is not in the file", path, name, of);
    aliases_[name] = of;
  }
}

void NqCheckpoint::release(const TensorView& t) const {
  if (map_->maps(t.data, t.nbytes)) release_mapped_pages(t.data, t.nbytes);
}

std::string NqCheckpoint::alias_of(const std::string& name) const {
  auto it = aliases_.find(name);
  return it == aliases_.end() ? "" : it->second;
}

// Checksums are verified on a tensor's first lookup, i.e. as the loader takes it (all of them at
// load time), not when the file is opened: a stale cache (a different checkpoint) then costs no
// hashing, and the pages are read once, by the hash, just before the model needs them.
const TensorView* NqCheckpoint::verified(const Entry& e) const {
  std::lock_guard<std::mutex> lock(verify_mu_);
  if (!e.verified) {
    verify(e.view, e.sum, description_);
    e.verified = true;
  }
  return &e.view;
}

void NqCheckpoint::verify_all() const {
  for (const auto& [name, e] : cached_) verified(e);
}

const TensorView* NqCheckpoint::lookup(const std::string& name) const {
  auto it = cached_.find(name);
  if (it != cached_.end()) return verified(it->second);
  if (aliases_.count(name)) return verified(cached_.at(aliases_.at(name)));
  // In the checkpoint but not in the cache: this build wants a tensor the cache was made without.
  if (std::binary_search(names_.begin(), names_.end(), name))
    throw NqStale(description_ + ": does not hold '" + name + "', which this build reads");
  return nullptr;
}

}  // namespace kvad
