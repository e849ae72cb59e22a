// Session: owns a sequence's cache (KV, latent or recurrent state) and the tokens it holds.
// Everything above it -- prefix reuse, sampling, streaming, chat, the server -- talks only to this
// and never to a backend or an architecture.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "models/model.h"

namespace kvad {

class Session {
 public:
  virtual ~Session() = default;
  // Appends tokens (n >= 1) after the held ones; returns the logits of the last one [vocab].
  virtual const std::vector<float>& forward(const std::vector<int32_t>& tokens) = 0;
  // Positions held.
  virtual int64_t cached() const = 0;
  // Rewinds to n positions where the cache can; RETURNS where it actually landed (a recurrent
  // state may refuse and land at 0). Callers forward from the returned position.
  virtual int64_t truncate(int64_t n) = 0;
  // The tokens whose positions are held (size() == cached()).
  virtual const std::vector<int32_t>& tokens() const = 0;
  virtual int64_t context_length() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual size_t kv_bytes() const = 0;            // cache memory held now
  virtual size_t kv_bytes_per_token() const = 0;  // what the cache really stores per position
};

// The CPU session over any registered model.
std::unique_ptr<Session> make_cpu_session(const Model& model);

// Prefix reuse: keeps the longest common prefix of what the session holds and `prompt` (at most
// prompt.size() - 1 tokens, so the last prompt token is always forwarded and yields logits).
// Returns the number of positions reused (what the caller reports as cached_tokens).
int64_t reuse_prefix(Session& session, const std::vector<int32_t>& prompt);

}  // namespace kvad
