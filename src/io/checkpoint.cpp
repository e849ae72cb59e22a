#include "io/checkpoint.h"

#include "core/error.h"

namespace kvad {

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorView::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); i++) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

static std::string shape_to_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); i++) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

TensorView Checkpoint::get(const std::string& name) {
  const TensorView* t = lookup(name);
  if (!t) fail("{}: missing required tensor '{}'", description_, name);
  read_.insert(name);
  return *t;
}

namespace {
// A shape without its leading 1s: the same row-major bytes. GGUF writers drop them (llama.cpp's
// quantize stores Qwen3-Next's [1, hidden] shared_expert_gate as [hidden]).
std::vector<int64_t> without_leading_ones(std::vector<int64_t> s) {
  size_t i = 0;
  while (i + 1 < s.size() && s[i] == 1) i++;
  s.erase(s.begin(), s.begin() + (ptrdiff_t)i);
  return s;
}
}  // namespace

TensorView Checkpoint::get(const std::string& name, const std::vector<int64_t>& shape) {
  TensorView t = get(name);
  if (t.shape != shape && !t.transposed && without_leading_ones(t.shape) == without_leading_ones(shape))
    t.shape = shape;
  if (t.shape != shape)
    fail("{}: tensor '{}' has shape {}, expected {} (config.json and weights disagree)", t.file, name,
         t.shape_str(), shape_to_str(shape));
  // Block formats come from GGUF files, whose reader checked that they are supported; F8_E4M3
  // is read by the caller together with its block scales (models/weight_source.h).
  if (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16 && t.dtype != DType::F8_E4M3 &&
      !dtype_is_block(t.dtype))
    fail("{}: tensor '{}' has dtype {}; only F32, F16, BF16 and F8_E4M3 weights are supported", t.file, name,
         dtype_name(t.dtype));
  return t;
}

std::optional<TensorView> Checkpoint::get_optional(const std::string& name, const std::vector<int64_t>& shape) {
  if (!has(name)) return std::nullopt;
  return get(name, shape);
}

void Checkpoint::check_all_read(const std::vector<std::string>& ignorable) const {
  std::vector<std::string> unread;
  for (const std::string& n : names()) {
    if (read_.count(n)) continue;
    bool ok = false;
    for (const std::string& pat : ignorable) ok = ok || n.find(pat) != std::string::npos;
    if (!ok) unread.push_back(n);
  }
  if (unread.empty()) return;
  std::string list;
  for (size_t i = 0; i < unread.size() && i < 10; i++) list += (i ? ", " : "") + unread[i];
  if (unread.size() > 10) list += fmt::format(" and {} more", unread.size() - 10);
  fail("{}: {} tensor(s) in the checkpoint were not used by the model: {} "
       "(the config does not describe these weights; refusing to run a different model than the one saved)",
       description_, unread.size(), list);
}

}  // namespace kvad
