// The quantised-weight cache (.nq): a model's weights as kvad's loaders use them (packed q8/q4
// matrices, f32 vectors), written once on the first quantised load and memory-mapped afterwards.
//
//   [ "KVADNQ\0\1" ][ data: tensors, each 64-byte aligned ][ JSON header ][ u64: header offset ]
//
// Each tensor entry carries the xxh64 checksum of its bytes, verified before the tensor is first
// used (a corrupt cache is an Error: the loader removes and rebuilds it). Writing goes through a
// temp file and rename; a writer killed mid-write leaves "<file>.tmp.<pid>", removed by the next
// open or write of that cache.
//
// The header carries a stamp of the source checkpoint: its files (size, mtime) and its ENTIRE
// tensor list, so the unread-tensor guard still sees every name the checkpoint holds, and a
// changed checkpoint or a build that wants a tensor the cache lacks is a miss (rebuild), never a
// silently different model.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "core/mmap_file.h"
#include "io/checkpoint.h"

namespace kvad {

// Raised when a cache file does not match its source (or lacks a tensor): rebuild it.
class NqStale : public Error {
 public:
  using Error::Error;
};

class NqWriter {
 public:
  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, const uint8_t* data, size_t bytes);
  // An entry that is another tensor's bytes (e.g. a saved tied head identical to the embedding).
  void alias(const std::string& name, const std::string& of);
  // Writes atomically (temp name, fsync, rename).
  void write(const std::string& path, const Json& stamp) const;

 private:
  struct Entry {
    std::string name, alias_of;
    DType dtype;
    std::vector<int64_t> shape;
    const uint8_t* data;
    size_t bytes;
  };
  std::vector<Entry> entries_;
};

class NqCheckpoint : public Checkpoint {
 public:
  // Opens and validates the file; throws NqStale when its stamp differs from `expected_stamp`,
  // Error when it is truncated or corrupt. `paging`: HugePages for weights the CPU streams every
  // token; Mapped for bytes read once (a GPU's upload), which need no anonymous copy.
  NqCheckpoint(const std::string& path, const Json& expected_stamp, Paging paging = Paging::HugePages);
  // Parses and validates a whole file image (for fuzzing).
  static void validate(const uint8_t* data, size_t size, const std::string& what);
  std::vector<std::string> names() const override { return names_; }
  // The alias recorded for `name`, or "" (see NqWriter::alias).
  std::string alias_of(const std::string& name) const;
  // Checks every tensor's checksum now (lookup checks each on first use); throws Error naming the
  // first corrupt tensor.
  void verify_all() const;
  // Drops a tensor's pages from resident memory when the file is mapped (Paging::Mapped).
  void release(const TensorView& t) const override;

 protected:
  const TensorView* lookup(const std::string& name) const override;

 private:
  struct Entry {
    TensorView view;
    uint64_t sum;                   // xxh64 of its bytes, from the header
    mutable bool verified = false;  // checked once, on first lookup
  };
  const TensorView* verified(const Entry& e) const;

  std::unique_ptr<MappedFile> map_;
  std::vector<std::string> names_;
  std::unordered_map<std::string, Entry> cached_;
  mutable std::mutex verify_mu_;
  std::unordered_map<std::string, std::string> aliases_;
};

// Bytes a packed matrix of this shape takes (KQ8/KQ4), for validation.
size_t packed_bytes(DType dtype, int64_t rows, int64_t cols);

}  // namespace kvad
