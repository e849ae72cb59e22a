// kvad cache: the quantised-weight caches (.nq) kvad keeps, and forgetting them.
#include <cstdio>

#include "cli/common.h"
#include "io/store.h"
#include "runtime/nq_cache.h"

namespace kvad::cli {

void add_cache(CLI::App& app) {
  auto* cmd = app.add_subcommand("cache", "list the quantised-weight caches (.nq), or forget a model's: kvad cache ORG/NAME");
  auto model = std::make_shared<std::string>();
  cmd->add_option("model", *model, "forget this model's caches (Org/Name, a store name, or a name from the list)");
  cmd->callback([model] {
    if (!model->empty()) {
      auto removed = forget_nq_caches(*model);
      if (removed.empty()) std::printf("no caches for %s in %s\n", model->c_str(), store_cache_dir().c_str());
      for (auto& c : removed) std::printf("removed %s (%.1f MB)\n", c.file.c_str(), (double)c.bytes / 1e6);
      return;
    }
    auto all = list_nq_caches();
    if (all.empty()) {
      std::printf("no quantised-weight caches in %s\n", store_cache_dir().c_str());
      return;
    }
    std::printf("%-48s %-6s %10s\n", "MODEL", "FORMAT", "SIZE");
    uint64_t total = 0;
    for (auto& c : all) {
      std::printf("%-48s %-6s %8.1f MB\n", c.model.c_str(), c.format.c_str(), (double)c.bytes / 1e6);
      total += c.bytes;
    }
    std::printf("%zu file(s), %.1f MB in %s\n", all.size(), (double)total / 1e6, store_cache_dir().c_str());
  });
}

}  // namespace kvad::cli
