// Pieces every subcommand shares: model/thread options, the embedded tokenizer fixtures, output.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "io/hub.h"
#include "runtime/engine.h"
#include "runtime/loader.h"
#include "runtime/sampler.h"
#include "runtime/speculative.h"

namespace kvad::cli {

struct ModelArgs {
  std::string model;
  int threads = 0;         // 0 = all cores
  bool pull = false;       // --pull: download a Hub model (ORG/NAME) first when it is not in the cache
  std::string quant = "auto";
  std::string kv_type = "auto";  // --kv-type: what the KV cache stores (kv_type_for)
  int64_t ctx = 0;              // -c/--ctx: cap the context (0 = the model's); run, chat
  SpeculativeConfig spec;       // where add_spec_args registered them: run, chat, tui
  std::vector<std::string> loras;  // --lora PATH[:SCALE], repeatable (runtime/lora.h)
  int64_t snapshot_every = -1, snapshots = -1;  // recurrent models' state snapshots (-1: the engine's defaults)
  std::string device = "cpu";  // --device cpu|gpu|gpu:N (runtime/devices.h)
  std::string gpu_memory;      // --gpu-memory SIZE: what kvad may fill of the GPU's memory ("" = all)
};
// Speculative decoding's flags (--draft MODEL or --spec ngram and their knobs): run, chat, tui, serve.
void add_spec_args(CLI::App* cmd, SpeculativeConfig& a);
// speculative_options() with the draft's load note printed, as the target's is.
SpeculativeOptions load_speculative(const SpeculativeConfig& a, const LoadedModel& target, int64_t ctx);

void add_model_args(CLI::App* cmd, ModelArgs& a, bool model_required = true);
void add_kv_type_option(CLI::App* cmd, std::string& kv_type);
// --kv-type's value: auto is bf16 on either device (half f32's bytes, and on the CPU the faster
// cache from memory: docs/kv-cache.md; llama.cpp's default f16 cache is the same size).
kernels::KvType kv_type_for(const std::string& name);
void add_device_option(CLI::App* cmd, std::string& device);  // --device, also on serve (which has no ModelArgs)
// --gpu-memory SIZE (EngineOptions::device_memory), also on serve; "" = all of the device's memory.
void add_gpu_memory_option(CLI::App* cmd, std::string& size);
// "[#####.......]": `frac` (clamped to 0..1) of `width` cells filled, for the terminal's progress lines.
std::string text_bar(double frac, int width);
// stderr's terminal width in columns (80 when it cannot be read). A line redrawn in place must be
// shorter: once it wraps, "\r\x1b[2K" erases only its last row and the rest stays on the screen.
int terminal_columns();
// `s` in at most `n` bytes, its middle replaced by "..." (a path keeps its start and its file name);
// never splits a UTF-8 character.
std::string elide_middle(const std::string& s, size_t n);
// `line` cut to one row of stderr's terminal (terminal_columns() - 1 bytes), for lines redrawn in place.
std::string fit_terminal_row(const std::string& line);
// --snapshot-every / --snapshots: recurrent models' state snapshots (EngineOptions), also on serve.
void add_snapshot_options(CLI::App* cmd, int64_t& every, int64_t& slots);
// -c/--ctx, the same name wherever a context applies (run, chat, score, serve).
CLI::Option* add_ctx_option(CLI::App* cmd, int64_t& ctx, const std::string& what = "cap the context at N tokens (default: the model's)",
                            const std::string& names = "-c,--ctx");
// Applies --threads and loads the model (--dtype picks the in-memory weight format).
LoadedModel load_from_args(const ModelArgs& a);
// --threads: 0 = all cores; warns when more than the machine has.
void apply_threads(int threads);
// --lora PATH[:SCALE] (repeatable), also on serve, which has no ModelArgs.
void add_lora_option(CLI::App* cmd, std::vector<std::string>& loras);
// Where and in what the model runs, as the model arguments say: --kv-type, --device, --gpu-memory
// and the GPU's weight cache. `kvad bench`, which sets the context and adapters per run, starts here.
EngineOptions device_engine_options(const ModelArgs& a, const LoadedModel& m);
// The engine's options the model arguments set: device_engine_options, --ctx, the snapshots, m's
// adapters from --lora, and the GPU copy's progress line.
EngineOptions engine_options(const ModelArgs& a, const LoadedModel& m);
// What run and chat use without --model: $KVAD_DEFAULT_MODEL, else models/kvad-kjv in the source tree.
std::string default_model();
// Positional words after run/chat (Ollama's `run MODEL [PROMPT]`): when --model was not given
// and the first word names a model (a folder, a .gguf, a path, a store name, a Hub ORG/NAME), it is
// the model and is removed from `words`; otherwise every word is the prompt and the default runs.
void take_positional_model(ModelArgs& a, std::vector<std::string>& words);
// The folder the shipped models live in (the source tree's models/).
std::string shipped_models_dir();

struct SamplingArgs {
  SamplingParams p;
  bool seed_given = false;
  int64_t max_tokens = 256;
  std::vector<std::string> stop;
  bool ignore_eos = false;
};
void add_sampling_args(CLI::App* cmd, SamplingArgs& a);
// Fills in a random seed when none was given (the stats line prints it, so any run can be repeated).
void finalize_sampling(SamplingArgs& a);

// Writes one tokenizer family's tokenizer.json + tokenizer_config.json into `dir`, from the copies
// compiled into the binary: qwen3 | llama3 | gpt2 | deepseek_v3 | gpt2-trim<N>.
void write_fixture_tokenizer(const std::string& family, const std::string& dir);

// Hub models (cmd_pull.cpp): download with a progress bar on stderr (Ctrl-C stops cleanly, exit
// 130), and --pull: pull only when the model is not already complete in the HF cache.
hf::PullResult pull_model(const std::string& name, bool quiet);
void pull_if_missing(const std::string& model);

// Registration of each subcommand (one file each).
void add_run(CLI::App& app);
void add_chat(CLI::App& app);
void add_synth(CLI::App& app);
void add_tokenize(CLI::App& app);
void add_pull(CLI::App& app);
void add_ls(CLI::App& app);
void add_rm(CLI::App& app);
void add_train(CLI::App& app);
void add_score(CLI::App& app);
void add_bench(CLI::App& app);
void add_cache(CLI::App& app);
void add_devices(CLI::App& app);
void add_serve(CLI::App& app);
void add_cluster(CLI::App& app);
void add_show(CLI::App& app);
void add_tui(CLI::App& app);
void add_images(CLI::App& app);  // cmd_images.cpp: kvad images make

// "3.2M", "1.54B" ("-" for 0): a parameter count as ls and show print it.
std::string format_parameters(int64_t n);

// "2GiB", "512MiB", "1.5G", "800M", "4096" (bytes) -> bytes; throws naming the flag.
size_t parse_byte_size(const std::string& text, const std::string& flag);

}  // namespace kvad::cli
