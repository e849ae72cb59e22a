// Engine: owns a model's engine-wide memory (the paged KV pool and its BlockManager), a backend,
// and the sequences that share them. Two faces:
//   - Sessions (open_session): one sequence driven by its caller, a forward at a time (CLI run and
//     chat, scoring, benchmarks).
//   - The step loop (submit + step): continuous batching. Each step takes every running
//     sequence's next token plus prefill chunks of waiting ones under a token budget (chunked
//     prefill: a long prompt never stalls the streams already decoding), runs ONE forward,
//     samples each sequence with its own sampler, streams, and admits new sequences between
//     steps. Finished or cancelled sequences free their blocks at once; when the pool runs out the
//     newest running sequence is preempted (its blocks freed) and recomputed later.
// Not thread-safe: one thread (the server's engine thread, or the CLI's main thread) calls it.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "models/model.h"
#include "runtime/block_manager.h"
#include "runtime/generate.h"
#include "runtime/session.h"

namespace kvad {

// Recurrent models: working state slots beyond --parallel (sessions, embeddings), and the
// snapshot defaults (docs/recurrent-state.md: measured on a 6-turn chat).
constexpr int64_t kSpareStateSlots = 8;
constexpr int64_t kDefaultSnapshotEvery = 64;
constexpr int64_t kDefaultSnapshotsPerSequence = 8;

struct EngineOptions {
  int64_t block_size = 16;   // positions per KV block (docs/kv-cache.md: why 16)
  int64_t kv_blocks = 0;     // pool size; 0 = from kv_bytes, else one sequence at full context per max_running
  size_t kv_bytes = 0;       // pool budget in bytes (--kv-memory)
  int64_t ctx = 0;           // per-sequence context cap; 0 = the model's
  int64_t max_running = 1;   // sequences decoding at once (--parallel)
  int64_t step_tokens = 256; // rows per step: decodes first, prefill chunks fill the rest
  // While sequences are decoding, a step's prefill rows are capped at
  // max(prefill_min_rows, prefill_per_decode x decoding rows): a step costs about its rows, so a
  // stream's inter-token latency stays within ~(1 + prefill_per_decode)x a decode-only step while
  // new prompts are taken in (docs/server.md: the ITL measurement). Idle streams: the whole budget.
  int64_t prefill_per_decode = 2;
  int64_t prefill_min_rows = 16;
  kernels::KvType kv_type = kernels::KvType::F32;  // what the cache stores (--kv-type)
  // Models with recurrent layers (Qwen3-Next): a snapshot of each sequence's state every
  // `snapshot_every` positions (a multiple of block_size; 0: none; -1: kDefaultSnapshotEvery),
  // in at most `snapshots` slots (-1: kDefaultSnapshotsPerSequence x max_running), so that a
  // rewind or a later request with the same start resumes from the last snapshot before it.
  // docs/recurrent-state.md: the measurements behind the defaults.
  int64_t snapshot_every = -1;
  int64_t snapshots = -1;
  std::vector<LoraUse> loras;  // the adapters sessions run with (run and chat's --lora)
  std::string device = "cpu";  // --device: cpu, gpu or gpu:N (runtime/devices.h); used when no backend is given
  // --gpu-memory: what the engine may fill of a backend's own memory (a GPU's), 0 = all of it. The
  // weights must fit; the KV cache takes what they leave but a working reserve, and a context the
  // user did not set is capped to fit (weights_note says so) where the model's full one does not.
  size_t device_memory = 0;
  // A backend that keeps the weights in a layout of its own (the GPU's q8/q4) converts them once
  // into this file and reads them from it afterwards, while its stamp (the source files) holds.
  std::string weight_cache;
  Json weight_cache_stamp;
  // Hears of each matrix a backend with memory of its own copies at start (a GPU's first load
  // repacks a 7B model for tens of seconds); the CLI draws it.
  WeightsProgress on_weights_progress;
};

// A sequence for the step loop. Callbacks run on the engine's thread.
struct GenerationRequest {
  std::vector<int32_t> prompt;
  GenerateOptions opts;
  // Choices of this prompt (OpenAI's n): the prompt is computed once, then the sequence forks
  // into n that share its blocks (the partial last one copied on first write). Choice i samples
  // with seed + i; TokenEvent::choice / GenerateResult::choice say whose, and on_done runs once
  // per choice. The n count toward max_running together (admitted when all fit).
  int64_t n = 1;
  const Tokenizer* tokenizer = nullptr;
  uint64_t cache_salt = 0;  // prefix reuse only among requests with the same salt
  std::vector<LoraUse> loras;  // the adapters this sequence runs with (its own rows only)
  // Each token as it is produced; return false to cancel.
  std::function<bool(const TokenEvent&)> on_token;
  // Once, at the end: the result (finish_reason "stop", "length", "cancelled") or an error.
  std::function<void(GenerateResult&&, const std::string& error)> on_done;
  // Polled every step (waiting or running): true = drop it ("cancelled").
  std::function<bool()> cancelled;
};

struct EngineStats {
  int64_t running = 0, waiting = 0;
  int64_t block_size = 0;
  BlockStats blocks;
  size_t bytes_per_token = 0, bytes_per_block = 0;
  int64_t tokens_held = 0;  // positions held by running sequences and open sessions
  uint64_t steps = 0, preemptions = 0;
  int64_t last_step_rows = 0;
  int64_t draft_tokens = 0, draft_accepted = 0;  // speculative decoding: drafts verified, and kept
  size_t state_bytes = 0;  // one recurrent state slot (every recurrent layer of one sequence); 0: none
  int64_t snapshot_every = 0;  // positions between snapshots (0: none)
};

// One running sequence as a monitor sees it (llama-server's /slots).
struct SequenceStatus {
  int32_t id = 0, choice = 0;
  int64_t prompt_tokens = 0, generated = 0;
  int64_t computed = 0;  // positions in the KV cache
  bool prefilling = false;
};

class Engine {
 public:
  // backend: null = the one opts.device names.
  Engine(const Model& model, EngineOptions opts, std::unique_ptr<Backend> backend = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const Model& model() const { return model_; }
  const EngineOptions& options() const { return opts_; }
  // What the backend did with the weights at start ("GPU weights from cache X"), and a context
  // capped to fit a GPU's memory; "" when neither.
  const std::string& weights_note() const { return weights_note_; }
  // The backend keeps every matrix in memory of its own (a GPU's): the model's host copies are
  // spare once this engine is the model's only one (release_host_weights_if_on_device).
  bool weights_on_device() const { return backend_->held_weight_bytes() > 0; }
  int64_t context_length() const { return ctx_; }

  std::unique_ptr<Session> open_session();

  // Queues a sequence; it starts at a later step(). Throws when the prompt cannot fit the context.
  int32_t submit(GenerationRequest req);
  bool has_work() const { return !running_.empty() || !waiting_.empty(); }
  // One forward over the running sequences and admitted prefill chunks; no-op when idle.
  void step();
  // Finishes every sequence as cancelled (shutdown, model swap).
  void cancel_all();
  int64_t running() const { return (int64_t)running_.size(); }
  int64_t waiting() const { return (int64_t)waiting_.size(); }
  EngineStats stats() const;
  // The running sequences into `out` (resized; no allocation when its capacity holds them).
  void sequences(std::vector<SequenceStatus>& out) const;

  // For sessions: one forward of `tokens` at positions from `pos0`, through `table`.
  // rowwise: each row attends as a decode step would (speculative verification; Batch::attend_rowwise).
  void forward_session(BlockTable& table, int32_t seq, const std::vector<int32_t>& tokens, int64_t pos0, Logits which,
                       std::vector<float>& logits, bool rowwise = false);
  // Embeddings: one forward over `inputs` (token ids) as temporary sequences that share and keep
  // nothing, writing the final hidden states of every row (or of each input's last row) to
  // out[rows, hidden], inputs in order. Running sequences are preempted when the pool is short.
  void hidden_states(std::span<const std::vector<int32_t>> inputs, bool last_only, std::vector<float>& out);
  BlockManager& blocks() { return *blocks_; }
  Memory& memory() { return *memory_; }
  size_t bytes_per_token() const { return memory_->spec().bytes_per_token(); }
  size_t bytes_per_block() const { return memory_->bytes_per_block(); }
  // Frees blocks by preempting running sequences, newest first, until `need` are available.
  bool make_room(int64_t need);
  void session_closed(int64_t held) { session_tokens_ -= held; }
  void session_resized(int64_t delta) { session_tokens_ += delta; }

 private:
  struct Sequence;
  void run(Batch& batch, std::vector<float>& logits);
  // Takes s's cached prefix and checks that its first chunk fits the pool; false = not now.
  bool admit(Sequence& s);
  StatePlan state_plan(const MemorySpec& spec, int64_t block_size) const;
  // The KV blocks a backend with memory of its own (a GPU) has room for after the weights, n
  // asked for; caps ctx_ (and says so in weights_note_) when the user did not set the context.
  int64_t fit_device_memory(size_t limit, size_t per_block, int64_t n);
  void preempt(Sequence& s);
  // Once parent's prompt is computed: its n - 1 sibling choices, sharing its blocks, each
  // sampling its first token from the same logits row.
  void fork_choices(Sequence& parent, const float* row, std::vector<std::unique_ptr<Sequence>>& born);
  // Samples s's next token from row; false when s finished with it.
  bool advance(Sequence& s, const float* row);
  // Streams the token s just produced and appends it; finishes s when generation ended. Returns
  // whether s goes on.
  bool deliver(Sequence& s, TokenEvent& ev, bool end);
  // Speculative decoding: a drafter per sequence; up to `room` drafts appended to s.tokens for
  // this step (returns how many); dropped again when blocks are short; verified after the forward.
  void start_drafting(Sequence& s, const GenerateOptions& opts);
  int64_t propose_drafts(Sequence& s, int64_t room);
  void drop_drafts(Sequence& s);
  void verify(Sequence& s, const float* rows);
  void finish(Sequence& s, const std::string& error = "");
  bool schedule_rows(Sequence& s, int64_t& budget);

  const Model& model_;
  EngineOptions opts_;
  int64_t ctx_ = 0;
  std::unique_ptr<Backend> backend_;
  std::string weights_note_;
  std::unique_ptr<Memory> memory_;
  std::unique_ptr<BlockManager> blocks_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;  // in admission order: the last is the newest
  Batch batch_, session_batch_;
  std::vector<float> logits_;
  TokenEvent event_;  // reused: its strings and vectors keep their capacity between steps
  std::vector<Sequence*> in_batch_;
  int32_t next_id_ = 1;
  int64_t session_tokens_ = 0;
  uint64_t steps_ = 0, preemptions_ = 0;
  int64_t draft_tokens_ = 0, draft_accepted_ = 0;
  int64_t last_rows_ = 0;
  int64_t budget_left_ = 0;  // of the step being scheduled (admit's first chunk)
};

// For a model run by one engine (kvad run, chat, serve): when that engine's backend holds the
// weights (a GPU), the model's host copies go (Model::release_host_matrices). Not for a model that
// another engine, on the CPU, also runs (kvad bench's variants, the tests' comparisons).
void release_host_weights_if_on_device(Model& model, const Engine& engine);

}  // namespace kvad
