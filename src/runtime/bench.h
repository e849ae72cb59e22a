// Speed measurement in the manner of llama-bench: for a prompt of P random tokens, prefill in one
// forward (its time is the time to first token), then G single-token greedy decode steps; repeated
// after a warm-up, reported as min/median/max. Each rep also records how many cores other
// processes kept busy meanwhile, since a figure taken on a busy machine is not a figure.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/model.h"
#include "runtime/engine.h"
#include "runtime/speculative.h"
#include "tokenizer/tokenizer.h"

namespace kvad {

struct Stats {
  double min = 0, median = 0, max = 0;
};
Stats stats_of(std::vector<double> v);

struct BenchRun {
  int64_t prompt_tokens = 0, gen_tokens = 0;
  int reps = 0;
  Stats prefill_tok_s;
  std::optional<Stats> decode_tok_s;  // none when gen_tokens == 0
  std::vector<double> decode_reps;    // each measured rep's decode tok/s, in order (paired across variants)
  double ttft_ms = 0;                 // median prefill time of the prompt incl. picking the first token
  std::vector<double> other_cores;    // per rep: cores used by other processes (0 = quiet machine)
};

BenchRun bench_model(const Model& model, int64_t prompt_tokens, int64_t gen_tokens, int reps, int warmup,
                     kernels::KvType kv_type = kernels::KvType::F32);
// The same measurement under several adapter sets (`variants`, {} = the base alone), rep by rep in
// turn on the same prompt: a drift of the machine's speed (other load, heat) shifts every variant
// alike, so their ratio is the adapters' cost. One BenchRun per variant.
// base: the engine's settings (--kv-type, --device); its context and adapters are set per variant.
std::vector<BenchRun> bench_interleaved(const Model& model, int64_t prompt_tokens, int64_t gen_tokens, int reps,
                                        int warmup, const EngineOptions& base,
                                        const std::vector<std::vector<LoraUse>>& variants);

// The engine alone, batched (llama-batched-bench's measurement, no HTTP): B sequences of P random
// prompt tokens prefilled in one step, then decoded together for G greedy steps through the
// engine's step loop. Aggregate throughputs over all B; step_ms is the median decode step.
struct BatchedRun {
  int64_t batch = 0, prompt_tokens = 0, gen_tokens = 0;
  double prefill_tok_s = 0, decode_tok_s = 0, step_ms = 0;
  double other_cores = 0;
};
BatchedRun bench_batched(const Model& model, const Tokenizer& tok, int64_t prompt_tokens, int64_t gen_tokens,
                         int64_t batch, const EngineOptions& base = {},  // --kv-type, --device
                         const std::vector<LoraUse>& loras = {});  // every sequence's adapters

// Speculative decoding against plain decoding, side by side: the same greedy generation of G
// tokens after `prompt` (fresh sessions, no prefix reuse, end-of-sequence ignored), plain and
// speculative alternating in each rep so both see the same machine. Decode tok/s of each, the
// per-rep ratio, the drafts kept, and whether every speculative output was the plain one.
struct SpeculativeRun {
  int reps = 0;
  int64_t gen_tokens = 0;
  Stats plain_tok_s, spec_tok_s, ratio;
  int64_t drafted = 0, kept = 0;
  bool same_output = true;
  double other_cores = 0;  // the most other processes used during a rep
};
SpeculativeRun bench_speculative(const Model& model, const Tokenizer& tok, const std::vector<int32_t>& prompt,
                                 int64_t gen_tokens, int reps, const SpeculativeOptions& spec);

// Read bandwidth of this machine with the process's threads (GB/s, 1e9 bytes): the bound decode
// cannot beat, since each token reads every weight once. `best` is the bound; `lowest`, the
// slowest of the same passes, says how much a neighbour moved it meanwhile (on a shared host the
// passes of one probe ranged 27-46 GB/s, and a decode's share moves with them: docs/kernels.md).
struct ReadBandwidth {
  double best = 0, lowest = 0;
  bool steady() const { return lowest >= 0.8 * best; }
};
ReadBandwidth measure_read_bandwidth(size_t bytes = (size_t)1 << 30);
// The most memory this process has held (VmHWM), and a restart of that count: the bandwidth
// probe's 1 GiB buffer would otherwise be the peak every benchmark reports. false when the
// kernel cannot reset it (then the peak includes whatever ran before).
size_t peak_rss_bytes();
bool reset_peak_rss();

// CPU time used by other processes, for the quiet-machine check (cores busy on average).
class ForeignCpu {
 public:
  ForeignCpu();
  double cores_since() const;  // average cores other processes used since construction

 private:
  double wall0_, total0_, self0_;
};

}  // namespace kvad
