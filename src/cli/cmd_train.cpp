// kvad train: trains a character-level GPT-2- or Llama-style model on a text file and saves it in
// kvad's store, where `kvad run --model NAME` finds it; with --lora, an adapter for a base model
// (saved under adapters/, where `--lora NAME` finds it). The loop is src/train/trainer.cpp; this
// file maps flags to its options and prints a sample from each checkpoint with the engine. Under
// `mpirun -np N` it joins the job first (src/train/distributed.h, docs/scale-out.md).
#include <cstdio>
#include <cstdlib>

#include "runtime/engine.h"
#include "cli/generation_io.h"
#include "core/error.h"
#include "core/fs.h"
#include "io/store.h"
#include "runtime/generate.h"
#include "runtime/loader.h"
#include "train/distributed.h"
#include "train/trainer.h"

namespace kvad::cli {

namespace {

// A short sample from the checkpoint just saved, run by the engine (what `kvad run` would do).
void print_sample(const std::string& dir, int64_t step, int64_t chars) {
  if (chars <= 0) return;
  LoadedModel m = load_model(dir, LoadOptions{});
  Engine engine(*m.model, EngineOptions{});
  std::unique_ptr<Session> session = engine.open_session();
  GenerateOptions g;
  g.sampling.temperature = 0.8f;
  g.sampling.seed = (uint64_t)step;
  g.max_tokens = std::min<int64_t>(chars, m.model->context_length() - 1);
  std::vector<int32_t> prompt = m.tokenizer->encode("\n");
  if (prompt.empty()) prompt = {0};
  GenerateResult r = generate(*session, *m.tokenizer, prompt, g, [](const TokenEvent&) { return true; });
  std::printf("--- sample at step %lld ---\n%s\n---\n", (long long)step, r.text.c_str());
  std::fflush(stdout);
}

}  // namespace

void add_train(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "train a character-level GPT on a text file (saved to kvad's store)");
  struct Args {
    train::TrainOptions o;
    std::string name, arch = "gpt2", schedule = "cosine";
    std::vector<std::string> targets = {"all-linear"};
    bool untied = false;
  };
  auto a = std::make_shared<Args>();
  train::TrainOptions& o = a->o;
  o.lr.min_lr = -1;
  cmd->add_option("--data", o.data, "the text to train on (UTF-8; bytes are the characters)");
  cmd->add_option("--name", a->name, "the model's name in kvad's store ($KVAD_HOME/models/NAME)")->required();
  cmd->add_option("--arch", a->arch, "gpt2 (LayerNorm, GELU, learned positions) or llama (RMSNorm, SwiGLU, RoPE)")
      ->check(CLI::IsMember({"gpt2", "llama"}));
  cmd->add_option("--layers", o.shape.layers, "transformer blocks (default 4)")->check(CLI::Range(1, 256));
  cmd->add_option("--dim", o.shape.dim, "model width (default 128)")->check(CLI::Range(1, 65536));
  cmd->add_option("--heads", o.shape.heads, "attention heads (default 4)")->check(CLI::Range(1, 1024));
  cmd->add_option("--kv-heads", o.shape.kv_heads, "key/value heads, llama only (default = --heads)")->check(CLI::Range(1, 1024));
  cmd->add_option("--ffn", o.shape.ffn, "MLP width (default 4 x dim; llama 8/3 x dim)")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("-c,--ctx,--context", o.shape.context, "context length in characters (default 128)")->check(CLI::Range(2, 1 << 16));
  cmd->add_flag("--untied", a->untied, "a separate output head (llama only; GPT-2 ties it to the embedding)");
  cmd->add_flag("--all-bytes", o.all_bytes, "vocabulary of all 256 bytes instead of the corpus's distinct bytes");
  cmd->add_option("--batch", o.batch, "sequences per step (default 16)")->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--steps", o.steps, "optimiser steps (default 1000)")->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--lr", o.lr.lr, "peak learning rate (default 1e-3)")->check(CLI::PositiveNumber);
  cmd->add_option("--min-lr", o.lr.min_lr, "learning rate at the end of the cosine (default lr/10)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--warmup", o.lr.warmup, "linear warm-up steps (default 0)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--schedule", a->schedule, "cosine (default) or constant")->check(CLI::IsMember({"cosine", "constant"}));
  cmd->add_option("--weight-decay", o.adam.weight_decay, "AdamW weight decay on matrices (default 0.1)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--grad-clip", o.adam.grad_clip, "clip the global gradient norm to this, 0 = off (default 1)")->check(CLI::NonNegativeNumber);
  cmd->add_option("-t,--threads", o.threads, "threads (default: all cores)")->check(CLI::Range(0, 1024));
  cmd->add_option("--seed", o.seed, "random seed of the initialisation and the batches (default 1337)");
  cmd->add_option("--precision", o.precision, "the linear layers' products: f32 (default) or bf16 (operands rounded "
                  "to bf16, sums in f32, weights and optimiser state f32; needs AVX512-BF16; docs/training.md)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  cmd->add_option("--eval-every", o.eval_every, "validation loss every N steps, 0 = off (default 250)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--eval-windows", o.eval_windows, "validation windows for the periodic loss (default 128)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--final-eval-windows", o.final_eval_windows, "windows for the final loss, 0 = all (default)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--save-every", o.save_every, "checkpoint every N steps, 0 = only at the end (default 500)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--log-every", o.log_every, "progress line every N steps when not on a terminal")->check(CLI::NonNegativeNumber);
  cmd->add_option("--sample-chars", o.sample_chars, "characters sampled at each checkpoint, 0 = none (default 200)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--timing-warmup", o.timing_warmup, "first steps left out of chars_per_s_median (default 5)")->check(CLI::NonNegativeNumber);
  cmd->add_flag("--resume", o.resume, "continue training NAME from its last checkpoint");
  cmd->add_flag("--force", o.force, "replace an existing model NAME");
  cmd->add_option("--json-out", o.json_out, "write the final summary (params, chars_per_s_median, val_bpc, ...) here");
  auto* lora_group = cmd->add_option_group("LoRA", "fine-tune an adapter on a frozen base (saved as a PEFT folder)");
  lora_group->add_flag("--lora", o.lora, "train a LoRA adapter for --base instead of a model from scratch");
  lora_group->add_option("--base", o.lora_opts.base_name, "the model to adapt: a name in kvad's store, a Hub name in the HF cache, or a folder (Llama, Qwen2, Qwen3, GPT-2)");
  lora_group->add_option("--base-quant", o.lora_opts.base_quant, "q8: learn against the base rounded to kvad's q8 (what --quant q8 serves)")
      ->check(CLI::IsMember({"q8"}));
  lora_group->add_option("--rank", o.lora_opts.adapter.rank, "adapter rank r (default 16)")->check(CLI::Range(1, 4096));
  lora_group->add_option("--alpha", o.lora_opts.adapter.alpha, "LoRA alpha: the side path is scaled by alpha / r (default 32)")->check(CLI::PositiveNumber);
  lora_group->add_flag("--rslora", o.lora_opts.adapter.rslora, "scale by alpha / sqrt(r) (rank-stabilised LoRA)");
  lora_group->add_option("--targets", a->targets, "modules to adapt, comma-separated (default all-linear = q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj; GPT-2: c_attn,c_proj,c_fc)")
      ->delimiter(',');
  cmd->callback([a, cmd] {
    train::TrainOptions& o = a->o;
    const std::string& name = a->name;
    if (name.empty() || name[0] == '.' || name.find('/') != std::string::npos || name.find('\\') != std::string::npos)
      fail("--name '{}': a model name is one folder name (letters, digits, - _ .), not a path", name);
    if (o.data.empty() && !o.resume) fail("train: --data FILE is required");
    if (o.resume && o.force) fail("train: --resume and --force contradict each other");
    for (const char* only : {"--base", "--base-quant", "--rank", "--alpha", "--rslora", "--targets"})
      if (!o.lora && cmd->count(only)) fail("train: {} is an option of --lora (fine-tuning an adapter)", only);
    if (o.lora) {
      for (const char* scratch : {"--arch", "--layers", "--dim", "--heads", "--kv-heads", "--ffn", "--untied", "--all-bytes"})
        if (cmd->count(scratch)) fail("train --lora: {} is the base's; it cannot be chosen for an adapter", scratch);
      if (o.lora_opts.base_name.empty() && !o.resume) fail("train --lora: --base MODEL is required (the model to adapt)");
      if (!o.lora_opts.base_name.empty()) o.lora_opts.base = resolve_model_path(o.lora_opts.base_name);
      o.lora_opts.adapter.targets = a->targets;
      // PEFT's and transformers' Trainer's default: no weight decay on the adapter.
      if (!cmd->count("--weight-decay")) o.adam.weight_decay = 0;
      if (!cmd->count("--sample-chars")) o.sample_chars = 0;
    }
    o.dir = join_path(o.lora ? store_adapters_dir() : store_models_dir(), name);
    o.shape.arch = a->arch == "llama" ? train::Arch::Llama : train::Arch::Gpt2;
    o.shape.tied = !a->untied;
    o.lr.kind = train::parse_schedule(a->schedule);
    for (const CLI::Option* opt : cmd->get_options())
      if (opt->count() > 0 && !opt->get_lnames().empty()) o.given.insert(opt->get_lnames()[0]);
    if (o.given.count("ctx")) o.given.insert("context");  // -c, --ctx, --context: the config calls it context
    install_interrupt_handler();
    train::TrainHooks hooks;
    hooks.stop = &g_interrupted;
    hooks.on_checkpoint = [&o](const std::string& dir, int64_t step) { print_sample(dir, step, o.sample_chars); };
    // Under mpirun: one rank of a data-parallel job. An error on any rank ends the whole job, named
    // by its rank, instead of leaving the others waiting for it in the next allreduce.
    train::join_world();
    const train::World& world = train::world();
    // Ctrl-C reaches mpirun, not the ranks, and mpirun ends them unsaved; it forwards SIGUSR1 to
    // every rank, so `kill -USR1 <mpirun's pid>` stops the job with a checkpoint as Ctrl-C does.
    if (world.distributed()) install_interrupt_handler(SIGUSR1);
    train::TrainResult r;
    try {
      r = train::run_training(o, hooks);
    } catch (const std::exception& e) {
      if (!world.distributed()) throw;
      train::abort_world(dynamic_cast<const std::bad_alloc*>(&e) ? "out of memory" : e.what());
    }
    train::leave_world();
    if (r.interrupted) {
      std::fflush(stdout);
      std::exit(130);  // the conventional status of a run stopped by Ctrl-C; the checkpoint is saved
    }
    if (!world.root()) return;
    if (o.lora)
      std::fprintf(stderr, "adapter saved as %s (%s); try: kvad run --model %s --lora %s --prompt \"...\"\n",
                   name.c_str(), o.dir.c_str(), o.lora_opts.base_name.c_str(), name.c_str());
    else
      std::fprintf(stderr, "model saved as %s (%s); try: kvad run --model %s --prompt \"...\"\n", name.c_str(),
                   o.dir.c_str(), name.c_str());
  });
}

}  // namespace kvad::cli
