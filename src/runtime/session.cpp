#include "runtime/session.h"

#include "core/error.h"

namespace kvad {

namespace {

class CpuSession final : public Session {
 public:
  explicit CpuSession(const Model& m) : model_(m), state_(m.new_state()) {}

  const std::vector<float>& forward(const std::vector<int32_t>& tokens) override {
    if (tokens.empty()) fail("Session::forward: no tokens given");
    int64_t n = (int64_t)tokens.size();
    if (cached() + n > context_length())
      fail("context full: {} tokens held + {} new exceeds the model's context of {} tokens", cached(), n,
           context_length());
    logits_.resize((size_t)model_.config().vocab_size);
    model_.forward(tokens.data(), n, *state_, logits_.data(), false);
    tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
    return logits_;
  }
  int64_t cached() const override { return state_->size(); }
  int64_t truncate(int64_t n) override {
    int64_t landed = state_->truncate(n);
    tokens_.resize((size_t)landed);
    return landed;
  }
  const std::vector<int32_t>& tokens() const override { return tokens_; }
  int64_t context_length() const override { return model_.context_length(); }
  int64_t vocab_size() const override { return model_.config().vocab_size; }
  size_t kv_bytes() const override { return state_->bytes(); }
  size_t kv_bytes_per_token() const override { return state_->bytes_per_token(); }

 private:
  const Model& model_;
  std::unique_ptr<ModelState> state_;
  std::vector<int32_t> tokens_;
  std::vector<float> logits_;
};

}  // namespace

std::unique_ptr<Session> make_cpu_session(const Model& model) { return std::make_unique<CpuSession>(model); }

int64_t reuse_prefix(Session& s, const std::vector<int32_t>& prompt) {
  const std::vector<int32_t>& held = s.tokens();
  size_t common = 0;
  size_t limit = prompt.empty() ? 0 : prompt.size() - 1;
  while (common < held.size() && common < limit && held[common] == prompt[common]) common++;
  return s.truncate((int64_t)common);
}

}  // namespace kvad
