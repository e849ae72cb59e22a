#include "grammar/matcher.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"

namespace kvad::grammar {

namespace {

constexpr int32_t kUnknown = -2, kDead = -1;
constexpr int32_t kEmptyStack = 0;  // frame 0: every rule completed (the sentence may end here)

// One stack frame: the next element to match at `pos`, returning to `parent` after its End.
struct Frame {
  int32_t pos, parent, depth;
};

// A DFA state: a set of stacks plus the bytes of a UTF-8 character still being read.
// Mid-character, a state is "exact" (the bits read so far kept, `set` the stacks before the
// character) or "settled": every code point the remaining bytes can still make is treated alike
// by every stack top (inside or outside each class: the usual case, [^"\\] against any non-ASCII
// character), so the outcome is already known and `set` holds the stacks after the character.
// Settling is what keeps string content to a handful of states instead of one per byte prefix.
struct State {
  int32_t set;
  uint32_t partial;  // exact: code point bits read so far; settled: 0
  uint8_t need;      // continuation bytes still to come (0: between characters)
  uint8_t len;       // the character's full length (exact: to refuse overlong forms)
  uint8_t settled;
};

// The smallest code point each UTF-8 length may encode (a smaller one is an overlong form).
constexpr uint32_t kMinCodePoint[5] = {0, 0, 0x80, 0x800, 0x10000};

uint64_t key2(int32_t a, int32_t b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }

struct VecHash {
  size_t operator()(const std::vector<int32_t>& v) const {
    uint64_t h = 1469598103934665603ull;
    for (int32_t x : v) h = (h ^ (uint32_t)x) * 1099511628211ull;
    return (size_t)h;
  }
};

}  // namespace

// The lazily built automaton of one matcher (not shared: each sequence builds its own).
class Automaton {
 public:
  Automaton(std::shared_ptr<const Grammar> g, const MatcherLimits& lim) : g_(std::move(g)), lim_(lim) {
    frames_.push_back({-1, -1, 0});  // kEmptyStack
    std::vector<int32_t> start;
    for (int32_t alt : g_->alts[(size_t)g_->root]) close(alt, kEmptyStack, start);
    initial_ = intern_state({intern_set(start), 0, 0, 0, 0});
  }
  int32_t initial() const { return initial_; }
  // Starts the per-call step budget (a mask, an accept_bytes).
  void begin_call() { call_steps_ = 0; }
  size_t state_count() const { return states_.size(); }

  int32_t step(int32_t s, uint8_t byte) {
    int32_t& t = trans_[(size_t)s * 256 + byte];
    if (t == kUnknown) {
      int32_t r = compute_step(s, byte);
      trans_[(size_t)s * 256 + byte] = r;  // (the table may have grown: no reference across)
      return r;
    }
    return t;
  }
  bool accepting(int32_t s) const {
    const State& st = states_[(size_t)s];
    const std::vector<int32_t>& set = sets_[(size_t)st.set];
    return st.need == 0 && !set.empty() && set[0] == kEmptyStack;
  }
  bool only_end(int32_t s) const {
    const State& st = states_[(size_t)s];
    return st.need == 0 && sets_[(size_t)st.set].size() == 1 && sets_[(size_t)st.set][0] == kEmptyStack;
  }

 private:
  int32_t frame(int32_t pos, int32_t parent) {
    auto [it, added] = frame_ids_.try_emplace(key2(pos, parent), (int32_t)frames_.size());
    if (added) {
      if (frames_.size() >= lim_.max_stacks) fail("grammar: the matcher needs more than {} stack frames", lim_.max_stacks);
      frames_.push_back({pos, parent, parent == kEmptyStack ? 1 : frames_[(size_t)parent].depth + 1});
    }
    return it->second;
  }

  void count_step() {
    if (++call_steps_ > lim_.max_steps_per_call)
      fail("grammar: the matcher needs more than {} steps for one token (the grammar is too ambiguous)", lim_.max_steps_per_call);
    if (++steps_ > lim_.max_steps)
      fail("grammar: the matcher needs more than {} steps in all (the grammar is too ambiguous)", lim_.max_steps);
  }

  // Expands (pos, parent) to the stacks whose top is a character set, or the empty stack.
  // Rule references push their continuation (none for a tail call); an End pops.
  void close(int32_t pos0, int32_t parent0, std::vector<int32_t>& out) {
    work_.clear();
    seen_.clear();
    work_.push_back({pos0, parent0});
    while (!work_.empty()) {
      auto [pos, parent] = work_.back();
      work_.pop_back();
      if (!seen_.insert(key2(pos, parent)).second) continue;
      count_step();
      const Element& e = g_->elems[(size_t)pos];
      if (e.kind == ElemKind::End) {
        if (parent == kEmptyStack) out.push_back(kEmptyStack);
        else work_.push_back({frames_[(size_t)parent].pos, frames_[(size_t)parent].parent});
      } else if (e.kind == ElemKind::Chars) {
        out.push_back(frame(pos, parent));
      } else {
        int32_t cont = parent;
        if (g_->elems[(size_t)pos + 1].kind != ElemKind::End) {
          cont = frame(pos + 1, parent);
          if (frames_[(size_t)cont].depth > lim_.max_depth) continue;  // too deep: this path is dropped
        }
        for (int32_t alt : g_->alts[(size_t)e.value]) work_.push_back({alt, cont});
      }
    }
  }

  int32_t intern_set(std::vector<int32_t>& set) {
    std::sort(set.begin(), set.end());
    set.erase(std::unique(set.begin(), set.end()), set.end());
    if (set.size() > lim_.max_set) set.resize(lim_.max_set);  // fewer stacks: a smaller language, never a wrong token
    auto [it, added] = set_ids_.try_emplace(set, (int32_t)sets_.size());
    if (added) sets_.push_back(set);
    return it->second;
  }
  int32_t intern_state(const State& st) {
    uint64_t k = (uint64_t)(uint32_t)st.set << 32 | (uint64_t)st.partial << 9 | (uint64_t)st.settled << 8 |
                 (uint64_t)st.need << 4 | st.len;
    auto [it, added] = state_ids_.try_emplace(k, (int32_t)states_.size());
    if (added) {
      if (states_.size() >= lim_.max_states) fail("grammar: the matcher needs more than {} states", lim_.max_states);
      states_.push_back(st);
      trans_.resize(states_.size() * 256, kUnknown);
    }
    return it->second;
  }

  // The stacks after character cp (or after any character of a settled range, cp standing for
  // it): `need` > 0 makes the settled state still waiting for that many bytes.
  int32_t advance(int32_t set_id, uint32_t cp, uint8_t need, uint8_t len) {
    std::vector<int32_t> next;
    for (int32_t f : sets_[(size_t)set_id]) {
      if (f == kEmptyStack) continue;
      const Frame& fr = frames_[(size_t)f];
      int32_t pos = fr.pos, parent = fr.parent;
      if (g_->charsets[(size_t)g_->elems[(size_t)pos].value].contains(cp)) close(pos + 1, parent, next);
    }
    if (next.empty()) return kDead;
    return intern_state({intern_set(next), 0, need, need ? len : (uint8_t)0, (uint8_t)(need ? 1 : 0)});
  }
  int32_t after_codepoint(int32_t set_id, uint32_t cp) { return advance(set_id, cp, 0, 0); }

  // A character begun, `need` bytes to come: settled when every top treats all of [lo, hi] alike.
  int32_t partial_state(int32_t set_id, uint32_t bits, uint8_t need, uint8_t len) {
    uint32_t lo = std::max(bits << (6 * need), kMinCodePoint[len]);
    uint32_t hi = std::min<uint32_t>(bits << (6 * need) | ((1u << (6 * need)) - 1), 0x10FFFF);
    if (lo > hi || (lo >= 0xD800 && hi <= 0xDFFF)) return kDead;
    // Keep the bits where the next byte's validity depends on them: a surrogate in the range, or
    // the lead bytes E0, F0 and F4 (whose second byte is restricted against overlong forms).
    bool lead = need + 1 == len;
    bool any = false, uniform = (lo > 0xDFFF || hi < 0xD800) && !(lead && (bits == 0 || (len == 4 && bits == 4)));
    for (int32_t f : sets_[(size_t)set_id]) {
      if (f == kEmptyStack) continue;
      const CharSet& cs = g_->charsets[(size_t)g_->elems[(size_t)frames_[(size_t)f].pos].value];
      bool some = cs.intersects(lo, hi);
      any |= some;
      if (some && !cs.covers(lo, hi)) uniform = false;
    }
    if (!any) return kDead;
    if (uniform) return advance(set_id, lo, need, len);
    return intern_state({set_id, bits, need, len, 0});
  }

  int32_t compute_step(int32_t s, uint8_t b) {
    const State st = states_[(size_t)s];
    if (st.need == 0) {
      if (b < 0x80) return after_codepoint(st.set, b);
      if (b >= 0xC2 && b <= 0xDF) return partial_state(st.set, b & 0x1F, 1, 2);
      if ((b >> 4) == 0xE) return partial_state(st.set, b & 0x0F, 2, 3);
      if (b >= 0xF0 && b <= 0xF4) return partial_state(st.set, b & 0x07, 3, 4);
      return kDead;
    }
    if ((b & 0xC0) != 0x80) return kDead;
    if (st.settled) return intern_state({st.set, 0, (uint8_t)(st.need - 1), st.need > 1 ? st.len : (uint8_t)0, (uint8_t)(st.need > 1)});
    uint32_t bits = st.partial << 6 | (b & 0x3F);
    if (st.need > 1) return partial_state(st.set, bits, (uint8_t)(st.need - 1), st.len);
    if (bits < kMinCodePoint[st.len] || bits > 0x10FFFF || (bits >= 0xD800 && bits <= 0xDFFF)) return kDead;
    return after_codepoint(st.set, bits);
  }

  std::shared_ptr<const Grammar> g_;
  MatcherLimits lim_;
  std::vector<Frame> frames_;
  std::unordered_map<uint64_t, int32_t> frame_ids_;
  std::vector<std::vector<int32_t>> sets_;
  std::unordered_map<std::vector<int32_t>, int32_t, VecHash> set_ids_;
  std::vector<State> states_;
  std::unordered_map<uint64_t, int32_t> state_ids_;
  std::vector<int32_t> trans_;  // states x 256
  int32_t initial_ = 0;
  std::vector<std::pair<int32_t, int32_t>> work_;
  std::unordered_set<uint64_t> seen_;
  size_t call_steps_ = 0, steps_ = 0;
};

struct GrammarMatcher::Impl {
  Impl(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenTrie> v, const MatcherLimits& lim)
      : dfa(std::move(g), lim), vocab(std::move(v)), limits(lim) {
    state = dfa.initial();
    words = ((size_t)vocab->vocab_size + 63) / 64;
    depth_state.resize((size_t)vocab->max_depth + 1);
  }

  // One preorder scan of the trie: a node's state is its parent's stepped by its byte; a dead
  // state skips the subtree.
  void compute_mask(int32_t s, std::vector<uint64_t>& bits) {
    bits.assign(words, 0);
    const auto& nodes = vocab->nodes;
    const int32_t* ids = vocab->token_ids.data();
    depth_state[0] = s;
    for (size_t i = 1; i < nodes.size();) {
      const TokenTrie::Node& n = nodes[i];
      int32_t next = dfa.step(depth_state[n.depth - 1u], n.byte);
      if (next < 0) {
        i = (size_t)n.skip;
        continue;
      }
      depth_state[n.depth] = next;
      for (int32_t k = n.tok_begin; k < n.tok_end; k++) bits[(size_t)ids[k] >> 6] |= uint64_t(1) << (ids[k] & 63);
      i++;
    }
    if (dfa.accepting(s))
      for (int32_t e : vocab->eos_ids)
        if (e >= 0 && e < vocab->vocab_size) bits[(size_t)e >> 6] |= uint64_t(1) << (e & 63);
  }

  const std::vector<uint64_t>& mask() {
    auto it = cache.find(state);
    if (it != cache.end()) return it->second;
    if (cache.size() >= limits.max_cached_masks) cache.clear();
    auto slot = cache.try_emplace(state).first;
    dfa.begin_call();
    try {
      compute_mask(state, slot->second);
    } catch (...) {  // a limit reached mid-scan: no half-built mask stays cached
      cache.erase(slot);
      throw;
    }
    return slot->second;
  }

  Automaton dfa;
  std::shared_ptr<const TokenTrie> vocab;
  MatcherLimits limits;
  int32_t state;
  bool ended = false;
  size_t words;
  std::vector<int32_t> depth_state;
  std::unordered_map<int32_t, std::vector<uint64_t>> cache;
};

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> vocab,
                               const MatcherLimits& limits)
    : impl_(std::make_unique<Impl>(std::move(grammar), std::move(vocab), limits)) {}
GrammarMatcher::~GrammarMatcher() = default;
GrammarMatcher::GrammarMatcher(GrammarMatcher&&) noexcept = default;
GrammarMatcher& GrammarMatcher::operator=(GrammarMatcher&&) noexcept = default;

const std::vector<uint64_t>& GrammarMatcher::allowed() { return impl_->mask(); }

void GrammarMatcher::mask_logits(float* logits, int64_t n) {
  const std::vector<uint64_t>& bits = impl_->mask();
  bool any = false;
  for (uint64_t w : bits) any |= w != 0;
  const int64_t V = std::min<int64_t>(n, impl_->vocab->vocab_size);
  for (int64_t base = 0; base < V; base += 64) {
    uint64_t w = any ? bits[(size_t)base >> 6] : 0;
    int64_t end = std::min<int64_t>(base + 64, V);
    if (w == 0) std::fill(logits + base, logits + end, -INFINITY);  // most words of a tight mask
    else if (w != ~uint64_t(0))
      for (int64_t t = base; t < end; t++)
        if (!((w >> (t - base)) & 1)) logits[t] = -INFINITY;
  }
  for (int64_t t = V; t < n; t++) logits[t] = -INFINITY;
  if (!any)  // nothing the vocabulary can write fits: end rather than sample from nothing
    for (int32_t e : impl_->vocab->eos_ids)
      if (e >= 0 && e < n) logits[e] = 0;
}

bool GrammarMatcher::accept(int32_t token) {
  const TokenTrie& v = *impl_->vocab;
  if (impl_->ended) return false;
  if (std::find(v.eos_ids.begin(), v.eos_ids.end(), token) != v.eos_ids.end()) {
    if (!accepting()) return false;
    impl_->ended = true;
    return true;
  }
  if (token < 0 || token >= v.vocab_size) return false;
  std::string_view bytes(v.blob.data() + v.offset[(size_t)token], v.offset[(size_t)token + 1] - v.offset[(size_t)token]);
  if (bytes.empty()) return false;  // special tokens: never under a grammar
  return accept_bytes(bytes);
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  if (impl_->ended) return false;
  int32_t s = impl_->state;
  impl_->dfa.begin_call();
  for (char c : bytes)
    if ((s = impl_->dfa.step(s, (uint8_t)c)) < 0) return false;
  impl_->state = s;
  return true;
}

bool GrammarMatcher::accepting() const { return impl_->dfa.accepting(impl_->state); }
bool GrammarMatcher::finished() const { return impl_->ended || impl_->dfa.only_end(impl_->state); }
size_t GrammarMatcher::states() const { return impl_->dfa.state_count(); }

bool grammar_accepts(const Grammar& g, std::string_view text) {
  Automaton dfa(std::make_shared<const Grammar>(g), MatcherLimits{});
  int32_t s = dfa.initial();
  for (char c : text)
    if ((s = dfa.step(s, (uint8_t)c)) < 0) return false;
  return dfa.accepting(s);
}

}  // namespace kvad::grammar
