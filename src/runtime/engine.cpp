#include "runtime/engine.h"

#include "runtime/devices.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "core/error.h"
#include "runtime/lora.h"

namespace kvad {

using Clock = std::chrono::steady_clock;

static double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

struct Engine::Sequence {
  int32_t id = 0;
  GenerationRequest req;
  std::vector<int32_t> tokens;  // prompt + generated; the last one is not computed yet while decoding
  int64_t computed = 0;         // positions whose keys/values are in memory
  BlockTable table;
  std::unique_ptr<TokenGenerator> gen;
  int64_t chunk = 0;            // rows scheduled in the current step
  int64_t forks = 0;            // sibling choices still to fork off once the prompt is computed
  int32_t choice = 0;
  bool admitted_once = false, done = false, has_first = false;
  // Speculative decoding: this step's drafts ride at the end of `tokens` from scheduling until
  // verification, which keeps the agreeing ones as the target's own tokens and drops the rest.
  std::unique_ptr<Drafter> drafter;
  std::optional<DraftLength> draft_length;
  DraftProposal draft;
  Clock::time_point t_submit, t_admit, t_first;
};

// --- sessions ---------------------------------------------------------------------------------

namespace {

class EngineSession final : public Session {
 public:
  EngineSession(Engine& e, int32_t id) : e_(e), id_(id) {}
  ~EngineSession() override {
    e_.blocks().release(table_);
    e_.session_closed((int64_t)tokens_.size());
  }
  const std::vector<float>& forward(const std::vector<int32_t>& t) override { return run(t, Logits::Last); }
  const std::vector<float>& forward_all(const std::vector<int32_t>& t) override { return run(t, Logits::All); }
  const std::vector<float>& forward_tentative(const std::vector<int32_t>& t, bool all_rows) override {
    return run(t, all_rows ? Logits::All : Logits::Last, /*tentative=*/true);
  }
  int64_t cached() const override { return (int64_t)tokens_.size(); }
  int64_t truncate(int64_t n) override {
    const int64_t held = cached(), landed = e_.blocks().rewind(table_, held, n, e_.memory());
    tokens_.resize((size_t)landed);
    e_.session_resized(landed - held);
    return landed;
  }
  int64_t reuse_prefix(const std::vector<int32_t>& prompt) override {
    size_t limit = prompt.empty() ? 0 : prompt.size() - 1, common = 0;
    while (common < tokens_.size() && common < limit && tokens_[common] == prompt[common]) common++;
    int64_t landed = truncate((int64_t)common);
    const int64_t bs = e_.blocks().block_size();
    if (landed % bs == 0 && (int64_t)table_.hashes.size() * bs == landed) {  // continue from other sequences' blocks
      int64_t covered = e_.blocks().match_prefix(table_, prompt, (int64_t)limit, e_.memory());
      if (covered > landed) {
        tokens_.assign(prompt.begin(), prompt.begin() + covered);
        e_.session_resized(covered - landed);
        landed = covered;
      }
    }
    return landed;
  }
  const std::vector<int32_t>& tokens() const override { return tokens_; }
  int64_t context_length() const override { return e_.context_length(); }
  int64_t vocab_size() const override { return e_.model().config().vocab_size; }
  size_t kv_bytes() const override { return table_.blocks.size() * e_.bytes_per_block(); }
  size_t kv_bytes_per_token() const override { return e_.bytes_per_token(); }

 private:
  const std::vector<float>& run(const std::vector<int32_t>& t, Logits which, bool tentative = false) {
    if (t.empty()) fail("Session::forward: no tokens given");
    int64_t n = (int64_t)t.size(), held = cached();
    if (held + n > context_length())
      fail("context full: {} tokens held + {} new exceeds the context of {} tokens", held, n, context_length());
    e_.forward_session(table_, id_, t, held, which, logits_, /*rowwise=*/tentative);
    tokens_.insert(tokens_.end(), t.begin(), t.end());
    if (!tentative) e_.blocks().register_full(table_, tokens_, held + n);
    e_.session_resized(n);
    return logits_;
  }
  Engine& e_;
  int32_t id_;
  BlockTable table_;
  std::vector<int32_t> tokens_;
  std::vector<float> logits_;
};

}  // namespace

// Advice naming the weight formats smaller than `format` ("choose a smaller weight format (-q q8 or
// q4) or " for bf16), to go before "run on the CPU"; "" for the smallest.
static std::string smaller_formats(const std::string& format) {
  if (format == "f32") return "choose a smaller weight format (-q bf16, q8 or q4) or ";
  if (format == "bf16") return "choose a smaller weight format (-q q8 or q4) or ";
  if (format == "q8" || format == "q6_K" || format == "q5_K") return "choose a smaller weight format (-q q4) or ";
  return "";
}

// --- the engine -------------------------------------------------------------------------------

Engine::Engine(const Model& model, EngineOptions opts, std::unique_ptr<Backend> backend)
    : model_(model), opts_(opts), backend_(backend ? std::move(backend) : make_backend(opts.device, model)) {
  const int64_t bs = opts_.block_size;
  if (bs <= 0 || bs > 4096) fail("KV block size {} is out of range (1..4096)", bs);
  if (opts_.max_running < 1) fail("--parallel must be at least 1 (got {})", opts_.max_running);
  if (opts_.step_tokens < 1) fail("the step token budget must be at least 1 (got {})", opts_.step_tokens);
  if (opts_.prefill_per_decode < 0 || opts_.prefill_min_rows < 1)
    fail("the prefill share while decoding needs per-decode >= 0 and at least 1 row (got {}, {})",
         opts_.prefill_per_decode, opts_.prefill_min_rows);
  ctx_ = opts_.ctx > 0 ? std::min(opts_.ctx, model.context_length()) : model.context_length();
  const size_t capacity = backend_->memory_capacity();
  const size_t device_limit = opts_.device_memory && capacity ? std::min(opts_.device_memory, capacity) : capacity;
  if (device_limit && model.weight_bytes() > device_limit)  // before copying any of them
    fail("{}: the weights take {:.2f} GiB in {}, more than the {:.2f} GiB kvad may use there{}: {}run on the CPU "
         "(--device cpu)",
         opts_.device, (double)model.weight_bytes() / (1 << 30), model.weight_format(), (double)device_limit / (1 << 30),
         opts_.device_memory ? " (--gpu-memory)" : "", smaller_formats(model.weight_format()));
  weights_note_ = backend_->prepare_weights(model.matrices(), opts_.weight_cache, opts_.weight_cache_stamp,
                                            opts_.on_weights_progress);
  MemorySpec spec = model.memory_spec();
  spec.kv_type = opts_.kv_type;
  size_t per_block = spec.bytes_per_token() * (size_t)bs;
  int64_t one_sequence = (ctx_ + bs - 1) / bs;
  int64_t n = opts_.kv_blocks;
  if (n <= 0 && opts_.kv_bytes > 0) n = (int64_t)(opts_.kv_bytes / std::max<size_t>(1, per_block));
  if (n <= 0) n = one_sequence * opts_.max_running;
  if (device_limit) {
    n = fit_device_memory(device_limit, per_block, n);
    one_sequence = (ctx_ + bs - 1) / bs;
  }
  if (n < one_sequence)
    fail("the KV memory holds {} blocks of {} positions ({} MiB), less than one sequence at the context of {} tokens "
         "needs ({} MiB): raise --kv-memory or lower --ctx",
         n, bs, (double)n * (double)per_block / (1 << 20), ctx_, (double)one_sequence * (double)per_block / (1 << 20));
  StatePlan states = state_plan(spec, bs);
  memory_ = backend_->make_memory(spec, n, bs, states.slots());
  blocks_ = std::make_unique<BlockManager>(n, bs, states);
}

void release_host_weights_if_on_device(Model& model, const Engine& engine) {
  if (&engine.model() != &model) fail("internal: releasing the host weights of a model this engine does not run");
  if (engine.weights_on_device()) model.release_host_matrices();
}

int64_t Engine::fit_device_memory(size_t limit, size_t per_block, int64_t n) {
  // A forward's scratch (activations, the rows' logits) stays out of the cache's share: a tenth,
  // at most 512 MiB.
  const size_t reserve = std::min<size_t>(limit / 10, size_t{512} << 20), used = backend_->memory_in_use();
  const int64_t room = used + reserve < limit ? (int64_t)((limit - used - reserve) / per_block) : 0;
  if (n <= room) return n;
  const int64_t bs = opts_.block_size, full = ctx_;
  const int64_t per_sequence = room / opts_.max_running;
  auto mib = [](double b) { return b / (1 << 20); };
  const std::string where =
      fmt::format("{:.0f} MiB of the {:.0f} MiB kvad may use on {} are left after {:.0f} MiB of weights and {:.0f} MiB "
                  "kept for working memory",
                  mib((double)room * (double)per_block), mib((double)limit), opts_.device, mib((double)used), mib((double)reserve));
  const char* raise = opts_.device_memory ? ", or raise --gpu-memory" : "";
  if (per_sequence < 1)
    fail("{}: no room for a KV cache ({}): {}run on the CPU (--device cpu){}", opts_.device, where,
         smaller_formats(model_.weight_format()), raise);
  if (opts_.ctx > 0 || opts_.kv_blocks > 0 || opts_.kv_bytes > 0)
    fail("{}: a KV cache of {} tokens x {} sequence(s) takes {:.0f} MiB, and {}: lower {}--ctx (at most {} fits) or "
         "--parallel{}{}",
         opts_.device, full, opts_.max_running, mib((double)n * (double)per_block), where,
         opts_.kv_bytes > 0 ? "--kv-memory or " : "", per_sequence * bs,
         opts_.kv_type == kernels::KvType::Q8 ? "" : ", or choose --kv-type q8", raise);
  ctx_ = std::min(full, per_sequence * bs);
  if (!weights_note_.empty()) weights_note_ += "; ";
  weights_note_ += fmt::format("context capped at {} tokens (the model's is {}) so that the KV cache fits {}'s memory; "
                               "-c/--ctx, --kv-type q8 or --gpu-memory to choose",
                               ctx_, full, opts_.device);
  return per_sequence * opts_.max_running;
}

StatePlan Engine::state_plan(const MemorySpec& spec, int64_t block_size) const {
  StatePlan p;
  if (spec.rewindable()) return p;
  p.working = opts_.max_running + kSpareStateSlots;
  int64_t every = opts_.snapshot_every >= 0 ? opts_.snapshot_every
                                            : (kDefaultSnapshotEvery + block_size - 1) / block_size * block_size;
  if (every % block_size)
    fail("snapshots of the recurrent state every {} positions: must be a multiple of the KV block size ({})", every,
         block_size);
  if (every == 0) return p;
  p.snapshot_every = every / block_size;
  p.snapshots = opts_.snapshots < 0 ? kDefaultSnapshotsPerSequence * opts_.max_running : opts_.snapshots;
  if (p.snapshots > (int64_t)1 << 20) fail("{} recurrent-state snapshots is too many (at most 2^20)", p.snapshots);
  if (p.snapshots == 0) p.snapshot_every = 0;
  return p;
}

Engine::~Engine() { cancel_all(); }

std::unique_ptr<Session> Engine::open_session() { return std::make_unique<EngineSession>(*this, next_id_++); }

void Engine::run(Batch& batch, std::vector<float>& logits) {
  logits.resize((size_t)(batch.n_logits() * model_.output_width(batch)));  // capacity kept: no allocation once grown
  model_.forward(batch, *memory_, *backend_, logits.data());
}

void Engine::forward_session(BlockTable& table, int32_t seq, const std::vector<int32_t>& tokens, int64_t pos0,
                             Logits which, std::vector<float>& logits, bool rowwise) {
  int64_t n = (int64_t)tokens.size();
  if (!blocks_->prepare(table, pos0, pos0 + n, *memory_)) {
    make_room(blocks_->blocks_needed(table, pos0, pos0 + n));
    if (!blocks_->state_available(table))
      fail("no recurrent state slot is free: {} sequences hold all of them (more than --parallel plus {} sessions)",
           blocks_->state_plan().working, kSpareStateSlots);
    if (!blocks_->prepare(table, pos0, pos0 + n, *memory_))
      fail("the KV memory is full: {} positions need {} more blocks of {} and only {} are free; raise --kv-memory",
           pos0 + n, blocks_->blocks_needed(table, pos0, pos0 + n), blocks_->block_size(), blocks_->available());
  }
  session_batch_.clear();  // a member: a session's decode step allocates nothing here
  session_batch_.add(seq, tokens, pos0, table.blocks, blocks_->block_size(), which, opts_.loras);
  session_batch_.set_state(table.state, blocks_->snapshot_of_block());
  if (rowwise) session_batch_.attend_rowwise();
  run(session_batch_, logits);
}

void Engine::hidden_states(std::span<const std::vector<int32_t>> inputs, bool last_only, std::vector<float>& out) {
  std::vector<BlockTable> tables(inputs.size());
  auto release_all = [&] {
    for (BlockTable& t : tables) blocks_->release(t);
  };
  try {
    int64_t need = 0;
    for (size_t i = 0; i < inputs.size(); i++) {
      const int64_t n = (int64_t)inputs[i].size();
      if (n == 0 || n > ctx_) fail("input {} has {} tokens; the context holds 1 to {}", i, n, ctx_);
      need += blocks_->blocks_needed(tables[i], 0, n);
    }
    if (!make_room(need))
      fail("the KV memory is full: {} inputs need {} blocks of {} and only {} are free; raise --kv-memory", inputs.size(),
           need, blocks_->block_size(), blocks_->available());
    Batch batch;  // its own: embeddings are rare next to decode steps, and never share their batch
    batch.set_output(RowOutput::Hidden);
    for (size_t i = 0; i < inputs.size(); i++) {
      const int64_t n = (int64_t)inputs[i].size();
      if (!blocks_->prepare(tables[i], 0, n, *memory_))
        fail("the KV memory is full (embeddings): {} inputs at once need a recurrent state slot each, {} are free",
             inputs.size(), blocks_->state_plan().working - blocks_->stats().states_used);
      batch.add((int32_t)(next_id_++), inputs[i], 0, tables[i].blocks, blocks_->block_size(),
                last_only ? Logits::Last : Logits::All);
      batch.set_state(tables[i].state);  // temporary sequences: no snapshots
    }
    run(batch, out);
  } catch (...) {
    release_all();
    throw;
  }
  release_all();
}

int32_t Engine::submit(GenerationRequest req) {
  if (req.prompt.empty()) fail("the prompt is empty: nothing to continue from");
  if ((int64_t)req.prompt.size() >= ctx_)
    fail("the prompt has {} tokens but the context is {} tokens (leave room for at least one new token)",
         req.prompt.size(), ctx_);
  if (!req.tokenizer) fail("Engine::submit: no tokenizer");
  if (req.n < 1 || req.n > opts_.max_running)
    fail("n = {} choices: the engine runs at most {} sequences at once (--parallel), and n must be 1 or more", req.n,
         opts_.max_running);
  auto s = std::make_unique<Sequence>();
  if (req.opts.speculative.enabled()) {
    validate(req.opts.speculative);
    if (!model_.memory_spec().rewindable())
      fail("speculative decoding needs a memory that can roll back rejected drafts, and {} keeps a recurrent state; "
           "run without --draft / --spec",
           model_.config().architecture);
    start_drafting(*s, req.opts);
  }
  s->forks = req.n - 1;
  s->id = next_id_++;
  s->tokens = req.prompt;
  s->table.salt = req.cache_salt ^ lora_salt(req.loras);
  s->gen = std::make_unique<TokenGenerator>(*req.tokenizer, req.prompt, req.opts);
  s->req = std::move(req);
  s->t_submit = Clock::now();
  int32_t id = s->id;
  waiting_.push_back(std::move(s));
  return id;
}

void Engine::finish(Sequence& s, const std::string& error) {
  if (s.done) return;
  s.done = true;
  std::string rest = s.gen->flush();
  if (!rest.empty() && error.empty() && s.req.on_token) {
    TokenEvent last;
    last.choice = s.choice;
    last.id = -1;
    last.text = rest;
    s.req.on_token(last);
  }
  blocks_->release(s.table);
  s.computed = 0;
  GenerateResult r = std::move(s.gen->result());
  r.choice = s.choice;
  Clock::time_point now = Clock::now();
  if (s.admitted_once) {
    r.queue_seconds = seconds_between(s.t_submit, s.t_admit);
    r.prefill_seconds = seconds_between(s.t_admit, s.has_first ? s.t_first : now);
    r.decode_seconds = s.has_first ? seconds_between(s.t_first, now) : 0;
  } else {
    r.queue_seconds = seconds_between(s.t_submit, now);
  }
  // Choices not forked yet (cancelled or failed before the prompt was computed) end with it.
  GenerateResult unborn;
  unborn.prompt_tokens = r.prompt_tokens;
  unborn.cached_tokens = r.cached_tokens;
  unborn.queue_seconds = r.queue_seconds;
  unborn.finish_reason = r.finish_reason;
  if (s.req.on_done) s.req.on_done(std::move(r), error);
  for (int64_t i = 1; i <= s.forks; i++) {
    unborn.choice = (int32_t)i;
    if (s.req.on_done) s.req.on_done(GenerateResult(unborn), error);
  }
  s.forks = 0;
}

void Engine::preempt(Sequence& s) {
  blocks_->release(s.table);
  s.computed = 0;
  preemptions_++;
  auto it = std::find_if(running_.begin(), running_.end(), [&](const auto& p) { return p.get() == &s; });
  std::unique_ptr<Sequence> owned = std::move(*it);
  running_.erase(it);
  waiting_.push_front(std::move(owned));  // first in line when room comes back
}

bool Engine::make_room(int64_t need) {
  while (blocks_->available() < need && !running_.empty()) preempt(*running_.back());
  return blocks_->available() >= need;
}

bool Engine::admit(Sequence& s) {
  // Blocks this sequence (or an earlier one with the same start) left registered are taken as
  // they are; at most all but the last token, so there are logits to sample from.
  int64_t covered = blocks_->match_prefix(s.table, s.tokens, (int64_t)s.tokens.size() - 1, *memory_);
  s.computed = covered;
  int64_t first = std::min<int64_t>((int64_t)s.tokens.size() - s.computed, budget_left_);
  if (blocks_->blocks_needed(s.table, s.computed, s.computed + first) > blocks_->available() ||
      !blocks_->state_available(s.table)) {
    blocks_->release(s.table);  // not now: keep waiting, holding nothing
    s.computed = 0;
    return false;
  }
  if (!s.admitted_once) {  // what the client hears as cached_tokens: the reuse at its first admission
    s.gen->result().cached_tokens = covered;
    s.admitted_once = true;
    s.t_admit = Clock::now();
  }
  return true;
}

// Schedules s's next rows into the batch: its one pending token when decoding, else a prefill
// chunk under the budget. Returns false when s was preempted for lack of blocks.
bool Engine::schedule_rows(Sequence& s, int64_t& budget) {
  int64_t pending = (int64_t)s.tokens.size() - s.computed;
  // A decode always runs (with its drafts when the budget has room); prefill fills what is left.
  int64_t n = pending == 1 ? 1 + propose_drafts(s, budget - 1) : std::min(pending, budget);
  if (n <= 0) return true;
  while (!blocks_->prepare(s.table, s.computed, s.computed + n, *memory_)) {
    if (n > 1 && !s.draft.tokens.empty()) {  // short of blocks: plain decode before preempting anyone
      drop_drafts(s);
      n = 1;
      continue;
    }
    // Preempt the newest running sequence not yet in this batch; if that is s itself, s waits.
    Sequence* victim = running_.back().get();
    bool scheduled = std::find(in_batch_.begin(), in_batch_.end(), victim) != in_batch_.end();
    if (victim == &s || scheduled) {
      preempt(s);
      return false;
    }
    preempt(*victim);
  }
  s.chunk = n;
  bool last = s.computed + n == (int64_t)s.tokens.size();
  Logits which = !s.draft.tokens.empty() ? Logits::All : last ? Logits::Last : Logits::None;
  batch_.add(s.id, std::span<const int32_t>(s.tokens).subspan((size_t)s.computed, (size_t)n), s.computed,
             s.table.blocks, blocks_->block_size(), which, s.req.loras);
  batch_.set_state(s.table.state, blocks_->snapshot_of_block());
  if (!s.draft.tokens.empty()) batch_.attend_rowwise();
  in_batch_.push_back(&s);
  budget -= n;
  return true;
}

void Engine::step() {
  // Cancelled sequences leave first, so their blocks are free for this step.
  for (auto& s : running_)
    if (s->req.cancelled && s->req.cancelled()) {
      s->gen->set_finish("cancelled");
      finish(*s);
    }
  for (auto& s : waiting_)
    if (s->req.cancelled && s->req.cancelled()) {
      s->gen->set_finish("cancelled");
      finish(*s);
    }
  auto gone = [](const std::unique_ptr<Sequence>& s) { return s->done; };
  running_.erase(std::remove_if(running_.begin(), running_.end(), gone), running_.end());
  waiting_.erase(std::remove_if(waiting_.begin(), waiting_.end(), gone), waiting_.end());

  batch_.clear();
  in_batch_.clear();
  // The prefill share: bounded by the decodes this step carries, so their streams keep their pace.
  int64_t decoding = 0;
  for (const auto& s : running_) decoding += (int64_t)s->tokens.size() - s->computed == 1;
  int64_t budget = opts_.step_tokens;
  if (decoding > 0)
    budget = std::min(budget, decoding + std::max(opts_.prefill_min_rows, opts_.prefill_per_decode * decoding));
  // Running sequences, oldest first: decodes take one row each, an unfinished prefill a chunk.
  for (size_t i = 0; i < running_.size(); i++) {
    Sequence* s = running_[i].get();
    if (!schedule_rows(*s, budget)) break;  // s was preempted (it was the newest): nothing after it runs
  }
  // Admit waiting sequences while there is room and budget (a request of n choices needs n places).
  while (!waiting_.empty() && (int64_t)running_.size() + 1 + waiting_.front()->forks <= opts_.max_running &&
         budget > 0) {
    budget_left_ = budget;
    if (!admit(*waiting_.front())) break;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    if (!schedule_rows(*running_.back(), budget)) break;
  }
  if (batch_.empty()) return;
  steps_++;
  last_rows_ = batch_.size();
  run(batch_, logits_);

  const int64_t V = model_.config().vocab_size;
  int64_t row = 0;
  std::vector<std::unique_ptr<Sequence>> born;  // stays empty (no allocation) unless a request forks
  for (Sequence* s : in_batch_) {
    if (!s->draft.tokens.empty()) {  // k drafts: k + 1 rows of logits
      const float* rows = &logits_[(size_t)(row * V)];
      row += (int64_t)s->draft.tokens.size() + 1;
      verify(*s, rows);
      continue;
    }
    s->computed += s->chunk;
    s->chunk = 0;
    blocks_->register_full(s->table, s->tokens, s->computed);
    if (s->computed < (int64_t)s->tokens.size()) continue;  // mid-prefill: no logits yet
    if (!s->has_first) {
      s->has_first = true;
      s->t_first = Clock::now();
    }
    const float* r = &logits_[(size_t)(row++ * V)];
    if (s->forks > 0) fork_choices(*s, r, born);
    advance(*s, r);
  }
  for (auto& b : born) running_.push_back(std::move(b));  // finished ones leave with the others below
  running_.erase(std::remove_if(running_.begin(), running_.end(), gone), running_.end());
}

bool Engine::advance(Sequence& s, const float* row) {
  TokenEvent& ev = event_;
  bool end;
  try {
    end = s.gen->next(row, model_.config().vocab_size, ev);
  } catch (const Error& e) {  // a grammar constraint past its matcher's limits: this sequence only
    finish(s, e.what());
    return false;
  }
  return deliver(s, ev, end);
}

bool Engine::deliver(Sequence& s, TokenEvent& ev, bool end) {
  ev.choice = s.choice;
  if (s.req.on_token && !s.req.on_token(ev)) {
    s.gen->set_finish("cancelled");
    end = true;
  }
  if (!end && (int64_t)s.tokens.size() >= ctx_) {  // no position left for it: "length", and says so
    s.gen->set_context_full(ctx_);
    end = true;
  }
  if (end) finish(s);
  else s.tokens.push_back(ev.id);
  return !end;
}

// --- speculative decoding ---------------------------------------------------------------------

void Engine::start_drafting(Sequence& s, const GenerateOptions& opts) {
  s.drafter = opts.speculative.source->open(opts.sampling);
  s.draft_length.emplace(opts.speculative);
}

int64_t Engine::propose_drafts(Sequence& s, int64_t room) {
  if (!s.drafter) return 0;
  const SpeculativeOptions& o = s.req.opts.speculative;
  // Drafts sit at positions computed + 1.. and must fit the context; past max_tokens they are waste.
  int64_t k = std::min({s.draft_length->next(), room, ctx_ - s.computed - 1,
                        s.req.opts.max_tokens - (int64_t)s.gen->generated().size() - 1});
  s.draft.clear();
  if (k <= 0) return 0;
  try {
    s.drafter->propose(s.tokens, k, s.draft);
  } catch (const Error&) {  // e.g. a draft engine out of blocks: this sequence goes on without drafts
    s.draft.clear();
    s.drafter.reset();
    return 0;
  }
  if ((int64_t)s.draft.tokens.size() < std::max<int64_t>(1, o.draft_min)) {
    s.draft.clear();
    return 0;
  }
  s.tokens.insert(s.tokens.end(), s.draft.tokens.begin(), s.draft.tokens.end());
  return (int64_t)s.draft.tokens.size();
}

void Engine::drop_drafts(Sequence& s) {
  s.tokens.resize((size_t)s.computed + 1);
  s.draft.clear();
}

void Engine::verify(Sequence& s, const float* rows) {
  const int64_t k = (int64_t)s.draft.tokens.size(), base = s.computed;  // base: the pending token's position
  s.tokens.resize((size_t)base + 1);  // kept drafts come back as the target's own tokens
  s.chunk = 0;  // (a sequence drafts only while decoding: its first token is long out)
  // The request's counts are current before each token is delivered: the last one may finish s,
  // which hands its result over. Row i's token equals draft i exactly when the draft was kept
  // (a rejected draft has no mass in the residual it is redrawn from).
  GenerateResult& res = s.gen->result();
  const int64_t kept_before = res.draft_accepted;
  res.draft_tokens += k;
  int64_t kept = 0, row = 0;
  try {
    kept = verify_drafts(*s.gen, rows, model_.config().vocab_size, s.draft, event_, [&](TokenEvent& ev, bool end) {
      res.draft_accepted = kept_before + row + (row < k && ev.id == s.draft.tokens[(size_t)row] ? 1 : 0);
      row++;
      return deliver(s, ev, end);
    });
  } catch (const Error& e) {  // a grammar constraint past its matcher's limits: this sequence only
    finish(s, e.what());
  }
  s.draft.clear();
  s.draft_length->update(k, kept);
  draft_tokens_ += k;
  draft_accepted_ += kept;
  if (s.done) return;
  s.computed = base + 1 + kept;
  blocks_->truncate(s.table, s.computed);  // the rejected drafts' positions: as if never forwarded
  blocks_->register_full(s.table, s.tokens, s.computed);
}

void Engine::fork_choices(Sequence& parent, const float* row, std::vector<std::unique_ptr<Sequence>>& born) {
  for (int64_t i = 1; i <= parent.forks; i++) {
    auto c = std::make_unique<Sequence>();
    c->id = next_id_++;
    c->choice = (int32_t)i;
    c->req = parent.req;  // the callbacks are shared: they tell the choices apart by index
    c->req.opts.sampling.seed = parent.req.opts.sampling.seed + (uint64_t)i;
    c->tokens = parent.tokens;
    c->computed = parent.computed;
    blocks_->fork(parent.table, c->table, *memory_);
    c->gen = std::make_unique<TokenGenerator>(*c->req.tokenizer, c->req.prompt, c->req.opts);
    if (c->req.opts.speculative.enabled()) start_drafting(*c, c->req.opts);
    c->gen->result().cached_tokens = parent.gen->result().cached_tokens;
    c->gen->result().choice = (int32_t)i;
    c->admitted_once = c->has_first = true;
    c->t_submit = parent.t_submit;
    c->t_admit = parent.t_admit;
    c->t_first = parent.t_first;
    advance(*c, row);  // every choice's first token from the prompt's one logits row
    born.push_back(std::move(c));
  }
  parent.forks = 0;
}

void Engine::cancel_all() {
  for (auto* q : {&running_}) {
    for (auto& s : *q) {
      s->gen->set_finish("cancelled");
      finish(*s);
    }
    q->clear();
  }
  for (auto& s : waiting_) {
    s->gen->set_finish("cancelled");
    finish(*s);
  }
  waiting_.clear();
}

void Engine::sequences(std::vector<SequenceStatus>& out) const {
  out.resize(running_.size());
  for (size_t i = 0; i < running_.size(); i++) {
    const Sequence& s = *running_[i];
    SequenceStatus& o = out[i];
    o.id = s.id;
    o.choice = s.choice;
    o.prompt_tokens = (int64_t)s.req.prompt.size();
    o.generated = (int64_t)s.tokens.size() - o.prompt_tokens;
    o.computed = s.computed;
    o.prefilling = s.computed < o.prompt_tokens;
  }
}

EngineStats Engine::stats() const {
  EngineStats st;
  st.running = (int64_t)running_.size();
  st.waiting = (int64_t)waiting_.size();
  st.block_size = blocks_->block_size();
  st.blocks = blocks_->stats();
  st.bytes_per_token = memory_->spec().bytes_per_token();
  st.bytes_per_block = memory_->bytes_per_block();
  st.tokens_held = session_tokens_;
  for (const auto& s : running_) st.tokens_held += s->computed;
  st.steps = steps_;
  st.preemptions = preemptions_;
  st.last_step_rows = last_rows_;
  st.draft_tokens = draft_tokens_;
  st.draft_accepted = draft_accepted_;
  st.state_bytes = memory_->spec().state_bytes();
  st.snapshot_every = blocks_->state_plan().snapshot_every * blocks_->block_size();
  return st;
}

}  // namespace kvad
