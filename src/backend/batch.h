// Batch: the rows one forward runs. Each row is (token, sequence, position, wants_logits); the
// rows of one sequence are contiguous and at consecutive positions (a prefill chunk, or the single
// token of a decode step), so one forward can mix prefill chunks of some sequences with decode
// tokens of others. Each sequence's span carries its block table: attention for its rows reads
// only its own blocks. Logits are produced only for the rows that want them, in row order; a batch
// whose output is Hidden gets those rows' final hidden states (after the last norm) instead, the
// vectors embeddings pool. Each span also names the LoRA adapters its sequence runs with
// (backend/lora.h): the backend adds their side paths to that span's rows only.
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "backend/lora.h"
#include "kernels/attention.h"

namespace kvad {

struct BatchRow {
  int32_t token = 0;
  int32_t seq = 0;
  int64_t pos = 0;
  bool wants_logits = false;
};

struct BatchSpan {
  int32_t seq = 0;
  int64_t row0 = 0, n = 0, pos0 = 0;
  std::span<const int32_t> blocks;  // covers positions 0 .. pos0 + n - 1
  std::span<const LoraUse> loras;   // the adapters of this sequence (kept alive by its owner)
  // Recurrent layers (backend/memory.h): the slot of this sequence's working state (-1: the model
  // has none), and per block id the slot that keeps a snapshot of the state as it stands after
  // that block's last position (-1: none; null: no snapshots at all).
  int32_t state = -1;
  const int32_t* snapshot_of_block = nullptr;
  int64_t block_size = 0;
};

enum class Logits { None, Last, All };

// What the forward writes for the rows that want output: logits [rows, vocab], or the final
// hidden states [rows, hidden] (embeddings). One kind per batch: embeddings run batches of their own.
enum class RowOutput { Logits, Hidden };

class Batch {
 public:
  // Keeps capacity: a steady stream of steps reuses the same memory.
  void clear() {
    rows_.clear();
    spans_.clear();
    attn_.clear();
    n_logits_ = 0;
    has_lora_ = false;
    output_ = RowOutput::Logits;
  }
  void set_output(RowOutput o) { output_ = o; }
  RowOutput output() const { return output_; }
  // Appends tokens of one sequence at positions pos0, pos0+1, ...
  void add(int32_t seq, std::span<const int32_t> tokens, int64_t pos0, std::span<const int32_t> blocks,
           int64_t block_size, Logits logits, std::span<const LoraUse> loras = {});

  // The last span's queries attend one by one, as decode steps do (AttentionSpan::rowwise):
  // speculative verification, whose rows must be what plain decoding computes.
  void attend_rowwise() { attn_.back().rowwise = true; }
  // The last span's recurrent state slot and snapshot slots (BatchSpan::state).
  void set_state(int32_t slot, const int32_t* snapshot_of_block = nullptr) {
    spans_.back().state = slot;
    spans_.back().snapshot_of_block = snapshot_of_block;
  }

  const std::vector<BatchRow>& rows() const { return rows_; }
  const std::vector<BatchSpan>& spans() const { return spans_; }
  // The spans as the attention kernels take them.
  const std::vector<kernels::AttentionSpan>& attention_spans() const { return attn_; }
  int64_t size() const { return (int64_t)rows_.size(); }
  bool empty() const { return rows_.empty(); }
  int64_t n_logits() const { return n_logits_; }
  bool has_lora() const { return has_lora_; }  // some span runs an adapter
  // The side paths weight w has in this batch (backend/lora.h): fn(row0, n, pair, scale) for each
  // run of neighbouring spans that share their adapters (one product for them all) and each of
  // those adapters that pairs w; scale is the use's times the pair's own, uses at 0 skipped. fn
  // returns false to stop, and then so does this.
  template <typename F>
  bool for_each_side_path(const Weight& w, F&& fn) const {
    for (size_t i = 0, j; i < spans_.size(); i = j) {
      for (j = i + 1; j < spans_.size() && std::ranges::equal(spans_[j].loras, spans_[i].loras);) j++;
      const int64_t row0 = spans_[i].row0, n = spans_[j - 1].row0 + spans_[j - 1].n - row0;
      for (const LoraUse& use : spans_[i].loras) {
        const LoraPair* p = use.adapter->find(&w);
        if (p && use.scale != 0 && !fn(row0, n, *p, use.scale * p->scale)) return false;
      }
    }
    return true;
  }

 private:
  std::vector<BatchRow> rows_;
  std::vector<BatchSpan> spans_;
  std::vector<kernels::AttentionSpan> attn_;
  int64_t n_logits_ = 0;
  bool has_lora_ = false;
  RowOutput output_ = RowOutput::Logits;
};

}  // namespace kvad
