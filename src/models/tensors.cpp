#include "models/tensors.h"

#include "core/error.h"
#include "models/weight_source.h"

namespace kvad {

int64_t TensorDecl::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {
TensorDecl declared(std::string hf, std::string gguf, std::vector<int64_t> shape, TensorRole role,
                    TensorInit init = TensorInit::Normal) {
  TensorDecl d;  // fields by name: the later ones keep their defaults without -Wmissing-field-initializers
  d.hf = std::move(hf);
  d.gguf = std::move(gguf);
  d.shape = std::move(shape);
  d.role = role;
  d.init = init;
  return d;
}
}  // namespace

TensorDecl matrix_tensor(std::string hf, std::string gguf, int64_t rows, int64_t cols, Weight* to) {
  TensorDecl d = declared(std::move(hf), std::move(gguf), {rows, cols}, TensorRole::Matrix);
  d.weight = to;
  return d;
}

TensorDecl conv1d_tensor(std::string hf, std::string gguf, int64_t in, int64_t out, Weight* to) {
  TensorDecl d = declared(std::move(hf), std::move(gguf), {in, out}, TensorRole::Conv1D);
  d.weight = to;
  return d;
}

TensorDecl vector_tensor(std::string hf, std::string gguf, std::vector<int64_t> shape, TensorInit init,
                         std::vector<float>* to) {
  TensorDecl d = declared(std::move(hf), std::move(gguf), std::move(shape), TensorRole::Vector, init);
  d.values = to;
  return d;
}

std::vector<AdaptableMatrix> adaptable_matrices(const TensorList& list) {
  std::vector<AdaptableMatrix> out;
  const std::string suffix = ".weight";
  for (const TensorDecl& d : list) {
    if (!d.adaptable || !d.weight || !d.hf.ends_with(suffix)) continue;
    out.push_back({d.hf.substr(0, d.hf.size() - suffix.size()), d.gguf, d.weight, d.gguf_permuted_heads});
  }
  return out;
}

std::vector<NamedWeight> named_matrices(const TensorList& list) {
  std::vector<NamedWeight> out;
  for (const TensorDecl& d : list)
    if (d.weight && d.tied_to.empty() && !d.weight->empty()) out.push_back({d.hf, d.weight});
  return out;
}

TensorDecl tied_tensor(std::string hf, std::string gguf, std::string tied_to, std::vector<int64_t> shape) {
  TensorDecl d = declared(std::move(hf), std::move(gguf), std::move(shape), TensorRole::Matrix);
  d.tied_to = std::move(tied_to);
  return d;
}

namespace {

// Some exports save the tied head anyway; accept it only if it really is the same matrix.
void check_tied_copy(const TensorDecl& d, WeightSource& src) {
  if (!src.has(d.hf)) return;
  if (!src.same_tensor(d.hf, d.tied_to, d.shape))
    fail("{}: tie_word_embeddings is true but {} differs from {}", src.checkpoint().description(), d.hf, d.tied_to);
}

void load_one(const TensorDecl& d, WeightSource& src) {
  if (!d.weight && !d.values) fail("internal: tensor '{}' is listed without a destination", d.hf);
  switch (d.role) {
    case TensorRole::Matrix: *d.weight = src.matrix(d.hf, d.shape[0], d.shape[1]); break;
    case TensorRole::Conv1D: *d.weight = src.matrix_transposed(d.hf, d.shape[0], d.shape[1]); break;
    case TensorRole::Vector: *d.values = src.vector(d.hf, d.shape); break;
  }
}

size_t loaded_bytes(const TensorDecl& d) {
  if (d.weight) return d.weight->bytes();
  if (d.values) return d.values->size() * sizeof(float);
  return 0;
}

}  // namespace

void load_tensors(const TensorList& list, WeightSource& src) {
  for (const TensorDecl& d : list) {
    if (!d.tied_to.empty()) {
      check_tied_copy(d, src);
    } else {
      load_one(d, src);
    }
  }
}

void forget_destinations(TensorList& list) {
  for (TensorDecl& d : list) d.weight = nullptr, d.values = nullptr;
}

int64_t parameter_count(const TensorList& list) {
  int64_t n = 0;
  for (const TensorDecl& d : list)
    if (d.tied_to.empty()) n += d.numel();
  return n;
}

TensorStats loaded_stats(const TensorList& list) {
  TensorStats s;
  s.parameters = parameter_count(list);
  for (const TensorDecl& d : list) {
    size_t bytes = loaded_bytes(d);
    s.weight_bytes += bytes;
    // A lookup table's step reads the rows of its tokens / positions: one row per decoded token.
    if (d.row_lookup && d.shape[0] > 0) bytes /= (size_t)d.shape[0];
    s.decode_read_bytes += (size_t)((double)bytes * d.read_share);
  }
  return s;
}

GgufNameMap gguf_name_map(const TensorList& list, bool permuted_qk) {
  GgufNameMap map;
  for (const TensorDecl& d : list) {
    if (d.gguf.empty()) continue;
    GgufTensorMapping& m = map[d.gguf];
    if (d.gguf_expert >= 0) {  // one slice of a stacked expert tensor, the others come with their own decls
      if (m.experts.size() <= (size_t)d.gguf_expert) m.experts.resize((size_t)d.gguf_expert + 1);
      m.experts[(size_t)d.gguf_expert] = d.hf;
      continue;
    }
    m.hf = d.hf;
    m.conv1d = d.role == TensorRole::Conv1D;
    m.unpermute_heads = permuted_qk ? d.gguf_permuted_heads : 0;
  }
  return map;
}

}  // namespace kvad
