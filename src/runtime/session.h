// Session: a handle to one sequence of an Engine (runtime/engine.h): the tokens it holds and their
// place in the engine-wide memory. The CLI, chat, scoring and benchmarks talk only to this; the
// server submits sequences to the engine's step loop instead. Neither sees a backend or an
// architecture.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

namespace kvad {

class Session {
 public:
  virtual ~Session() = default;
  // Appends tokens (n >= 1) after the held ones; returns the logits of the last one [vocab].
  virtual const std::vector<float>& forward(const std::vector<int32_t>& tokens) = 0;
  // Same, returning the logits of every new token [n, vocab] (scoring).
  virtual const std::vector<float>& forward_all(const std::vector<int32_t>& tokens) = 0;
  // Speculative decoding: appends positions that may be truncated right after (a pending token
  // and drafts). Logits of every row (all_rows) or the last; no block is registered for prefix
  // reuse, so rolling back into one never has to copy it. The next forward registers what stayed.
  // Each row is computed as a one-token forward would compute it (Batch::attend_rowwise), so a
  // verified token is the one plain decoding would have produced, bit for bit.
  virtual const std::vector<float>& forward_tentative(const std::vector<int32_t>& tokens, bool all_rows) = 0;
  // Positions held.
  virtual int64_t cached() const = 0;
  // Rewinds to n positions where the memory can; RETURNS where it actually landed (a recurrent
  // state may refuse and land at 0). Callers forward from the returned position.
  virtual int64_t truncate(int64_t n) = 0;
  // Prefix reuse: keeps the longest common prefix of what the session holds and `prompt`, and
  // when that ends on a block boundary, extends it from blocks other sequences left in the
  // engine's cache. At most prompt.size() - 1 positions, so the last prompt token is always
  // forwarded and yields logits. Returns the positions reused (what callers report as cached_tokens).
  virtual int64_t reuse_prefix(const std::vector<int32_t>& prompt) = 0;
  // The tokens whose positions are held (size() == cached()).
  virtual const std::vector<int32_t>& tokens() const = 0;
  virtual int64_t context_length() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual size_t kv_bytes() const = 0;            // memory of the blocks this sequence holds
  virtual size_t kv_bytes_per_token() const = 0;  // what the memory really stores per position
};

inline int64_t reuse_prefix(Session& s, const std::vector<int32_t>& prompt) { return s.reuse_prefix(prompt); }

}  // namespace kvad
