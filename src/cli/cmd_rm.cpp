// kvad rm MODEL: remove a model and say first what that frees.
//   ORG/NAME             every snapshot of it in the Hugging Face cache (the whole repo folder)
//   ORG/NAME@REVISION    that snapshot, and the blobs no other snapshot uses
//   ORG/NAME:FILE        one file (e.g. a .gguf) of the snapshot refs/main points at
//   NAME                 a model in kvad's store
// It also forgets the model's .nq caches ($KVAD_HOME/cache/Org--Name.*.nq, kvad--NAME.*.nq for the
// store) and its last-used entry.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>

#include "cli/common.h"
#include "core/error.h"
#include "core/fs.h"
#include "io/hub.h"
#include "io/model_usage.h"
#include "io/store.h"
#include "runtime/nq_cache.h"

namespace fs = std::filesystem;

namespace kvad::cli {

namespace {

// The .nq caches of a model in kvad's cache folder: Org--Name.<format>.nq for a Hub model,
// kvad--NAME.<format>.nq for one in kvad's store (the naming of src/runtime/nq_cache.h). The model
// field must match whole: "Org--Name" must not take "Org--Name.1"'s caches.
std::vector<std::string> nq_caches(const std::string& name, bool store) {
  std::string field = store ? "kvad--" : "";
  for (char c : name) field += c == '/' ? std::string("--") : std::string(1, c);
  std::vector<std::string> out;
  for (const NqCacheEntry& c : list_nq_caches())
    if (c.model == field) out.push_back(c.file);
  return out;
}

uint64_t size_of(const std::string& p) {
  std::error_code ec;
  uint64_t n = 0;
  if (fs::is_regular_file(fs::symlink_status(p, ec))) return fs::file_size(p, ec);
  for (auto it = fs::recursive_directory_iterator(p, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
    if (fs::is_regular_file(fs::symlink_status(it->path(), ec))) n += fs::file_size(it->path(), ec);
  return n;
}

bool confirm(bool yes) {
  if (yes) return true;
  std::fprintf(stderr, "remove? [y/N] ");
  std::fflush(stderr);
  std::string answer;
  if (!std::getline(std::cin, answer)) answer.clear();
  if (!isatty(0)) std::fprintf(stderr, "%s\n", answer.c_str());
  return !answer.empty() && (answer[0] == 'y' || answer[0] == 'Y');
}

// Answered no: nothing happens, as `rm -i` does; not an error (exit 0).
void kept(const std::string& what) { std::fprintf(stderr, "%s: not removed\n", what.c_str()); }

}  // namespace

void add_rm(CLI::App& app) {
  auto* cmd = app.add_subcommand("rm", "remove a downloaded model (and its .nq caches), after showing what it frees");
  auto name = std::make_shared<std::string>();
  auto yes = std::make_shared<bool>(false);
  cmd->add_option("model", *name, "ORG/NAME, ORG/NAME@REVISION, ORG/NAME:FILE, or a name in kvad's store")->required();
  cmd->add_flag("-y,--yes", *yes, "do not ask");
  cmd->callback([name, yes] {
    const std::string& n = *name;
    if (!n.empty() && n[0] != '/' && !is_directory(n) && find_in_store(n)) {
      std::string dir = *find_in_store(n);
      std::vector<std::string> nq = nq_caches(n, true);
      uint64_t bytes = size_of(dir);
      for (auto& f : nq) bytes += size_of(f);
      std::fprintf(stderr, "%s (kvad's store): removes %s%s, frees %s\n", n.c_str(), dir.c_str(),
                   nq.empty() ? "" : fmt::format(" and {} .nq cache(s)", nq.size()).c_str(), format_bytes(bytes).c_str());
      if (!confirm(*yes)) return kept(n);
      std::error_code ec;
      fs::remove_all(dir, ec);
      if (ec) fail("{}: cannot remove: {}", dir, ec.message());
      for (auto& f : nq) fs::remove(f, ec);
      forget_model_use("store:" + n);
      std::printf("removed %s, freed %s\n", n.c_str(), format_bytes(bytes).c_str());
      return;
    }
    if (!hf::looks_like_repo_ref(n))
      fail("{}: no model of that name in kvad's store ({}); Hub models are named ORG/NAME", n, store_models_dir());
    hf::RepoRef ref = hf::parse_repo_ref(n);
    std::string cache = hf::hub_cache_dir();
    auto repo = hf::scan_repo(cache, ref.repo_id);
    if (!repo || repo->snapshots.empty()) fail("{}: not in the Hugging Face cache ({})", ref.repo_id, cache);
    hf::RepoCache rc(cache, ref.repo_id);

    hf::RemovalPlan plan;
    std::string what;
    if (!ref.file.empty()) {
      auto commit = rc.resolve_commit(ref.revision);
      if (!commit) fail("{}: revision '{}' is not in the Hugging Face cache", ref.repo_id, ref.revision);
      auto c = hf::find_cached(cache, ref);
      if (!c || c->files.empty()) fail("{}: no file matching '{}' in {}", ref.repo_id, ref.file, rc.snapshot_dir(*commit));
      plan.repo_id = ref.repo_id;
      for (const std::string& f : c->files) {
        hf::RemovalPlan one = hf::plan_file_removal(*repo, *commit, f);
        plan.files.insert(plan.files.end(), one.files.begin(), one.files.end());
        plan.blobs.insert(plan.blobs.end(), one.blobs.begin(), one.blobs.end());
        plan.bytes_freed += one.bytes_freed;
        what += (what.empty() ? "" : ", ") + f;
      }
    } else if (ref.revision_given) {
      auto commit = rc.resolve_commit(ref.revision);
      if (!commit) fail("{}: revision '{}' is not in the Hugging Face cache", ref.repo_id, ref.revision);
      plan = hf::plan_removal(*repo, {*commit});
      what = "snapshot " + commit->substr(0, 12);
    } else {
      std::vector<std::string> all;
      for (const auto& s : repo->snapshots) all.push_back(s.commit);
      plan = hf::plan_removal(*repo, all);
      what = fmt::format("{} snapshot(s)", all.size());
    }
    std::vector<std::string> nq = plan.whole_repo ? nq_caches(ref.repo_id, false) : std::vector<std::string>{};
    uint64_t nq_bytes = 0;
    for (auto& f : nq) nq_bytes += size_of(f);
    std::fprintf(stderr, "%s (Hugging Face cache %s, shared with Python tools): removes %s, %zu blob(s)%s%s; frees %s\n",
                 ref.str().c_str(), cache.c_str(), what.c_str(), plan.blobs.size(),
                 plan.whole_repo ? " (the whole repo folder)" : "",
                 nq.empty() ? "" : fmt::format(", {} .nq cache(s)", nq.size()).c_str(),
                 format_bytes(plan.bytes_freed + nq_bytes).c_str());
    if (!confirm(*yes)) return kept(ref.str());
    hf::execute_removal(cache, plan);
    std::error_code ec;
    for (auto& f : nq) fs::remove(f, ec);
    if (plan.whole_repo) forget_model_use("hf:" + ref.repo_id);
    std::printf("removed %s, freed %s\n", ref.str().c_str(), format_bytes(plan.bytes_freed + nq_bytes).c_str());
  });
}

}  // namespace kvad::cli
