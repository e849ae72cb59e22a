// kvad synth: a checkpoint with random weights in a real architecture's layout, for tests and
// benchmarks.
#include <cstdio>
#include <filesystem>

#include "cli/common.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/threads.h"
#include "models/synth.h"

namespace kvad::cli {

void add_synth(CLI::App& app) {
  auto* cmd = app.add_subcommand("synth", "write a checkpoint with random weights in a real architecture's layout");
  auto o = std::make_shared<SynthOptions>();
  auto dtype = std::make_shared<std::string>("bf16");
  auto shard = std::make_shared<std::string>("5GB");
  auto force = std::make_shared<bool>(false);
  std::string archs, presets;
  for (auto& a : synth_archs()) archs += (archs.empty() ? "" : "|") + a;
  for (auto& p : synth_presets()) presets += (presets.empty() ? "" : "|") + p;
  cmd->add_option("--arch", o->arch, archs + " (default: the preset's, when only one architecture has it)")
      ->check(CLI::IsMember(synth_archs()));
  cmd->add_option("--preset", o->preset, presets)->required()->check(CLI::IsMember(synth_presets()));
  cmd->add_option("--out", o->out, "folder to write")->required();
  cmd->add_option("--seed", o->seed, "random seed (default 0)");
  cmd->add_option("--dtype", *dtype, "f32|f16|bf16 (default bf16)")->check(CLI::IsMember({"f32", "f16", "bf16"}));
  cmd->add_option("--std", o->std, "weights ~ N(0, std) (default 0.02)")->check(CLI::PositiveNumber);
  cmd->add_option("--norm-jitter", o->norm_jitter, "norm weights 1 + N(0, x) (default 0)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-shard-size", *shard, "shard above this many bytes, e.g. 200MB (default 5GB)");
  cmd->add_flag("--force", *force, "write into --out even if it already holds files");
  cmd->callback([o, dtype, shard, force] {
    std::error_code ec;
    if (!*force && is_directory(o->out) && !std::filesystem::is_empty(o->out, ec))
      fail("{}: the folder already holds files; --force writes the model into it anyway", o->out);
    o->dtype = *dtype == "f32" ? DType::F32 : *dtype == "f16" ? DType::F16 : DType::BF16;
    double mult = 1;
    std::string s = *shard;
    for (auto [suf, m] : {std::pair{"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}})
      if (s.size() > 2 && s.substr(s.size() - 2) == suf) {
        mult = m;
        s = s.substr(0, s.size() - 2);
      }
    try {
      o->max_shard_bytes = (uint64_t)(std::stod(s) * mult);
    } catch (...) {
      fail("--max-shard-size: '{}' is not a size (e.g. 200MB, 5GB)", *shard);
    }
    SynthResult r = synthesize(*o);
    if (!r.tokenizer.empty()) write_fixture_tokenizer(r.tokenizer, o->out);
    std::printf("%s: %s %s, %.1fM parameters, %.1f MB in %d file(s), tokenizer %s\n", o->out.c_str(),
                r.arch.c_str(), o->preset.c_str(), (double)r.parameters / 1e6, (double)r.bytes / 1e6, r.shards,
                r.tokenizer.empty() ? "none (this shape's own tokenizer is not bundled: token ids only)"
                                    : r.tokenizer.c_str());
  });
}

}  // namespace kvad::cli
