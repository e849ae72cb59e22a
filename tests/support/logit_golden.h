// The golden files of tools/make_model_goldens.py and tools/make_fp8_goldens.py (tests/golden/models):
// the checkpoint a golden was made from, synthesized again, and kvad's logits checked against the
// reference's at every position. Shared by tests/models_deepseek.cpp and tests/models_fp8.cpp.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "core/fs.h"
#include "core/json.h"
#include "golden_synth.h"
#include "models/synth.h"
#include "test_support.h"

namespace kvad::test {

struct Golden {
  Json j;
  std::string model_dir;
  std::vector<int32_t> prompt;
};

// The checkpoint a golden was made from, synthesized again, with the config.json keys the golden
// set after synth ("config_set": a layout no preset has).
inline Golden load_golden(const std::string& name) {
  Golden g;
  g.j = read_json_file(source_path("tests/golden/models/" + name + ".json"));
  SynthOptions o = golden_synth_options(g.j["synth"], g.j["synth"]["arch"], temp_dir(name));
  synthesize(o);
  if (g.j.contains("config_set")) {
    std::string path = join_path(o.out, "config.json");
    Json c = read_json_file(path);
    c.update(g.j["config_set"]);
    atomic_write_file(path, c.dump(2));
  }
  g.model_dir = o.out;
  g.prompt = g.j["prompt"].get<std::vector<int32_t>>();
  return g;
}

// Worst |kvad - reference| over the golden's logits at position t, and its tolerance: `rel` x the
// reference's max |logit| there.
inline std::pair<double, double> position_diff(const Json& j, const float* row, size_t t, double rel = 1e-3) {
  std::vector<int32_t> idx = j["indices"];
  double worst = 0;
  for (size_t i = 0; i < idx.size(); i++)
    worst = std::max(worst, std::fabs(row[idx[i]] - j["ref_logits"][t][i].get<double>()));
  return {worst, rel * j["ref_max_abs"][t].get<double>()};
}

// Every position within `rel` x max|logit| of the reference, with the reference's argmax (unless
// `argmax` is false: a lossy format may swap near-tied top tokens); prints the worst share.
inline void expect_logits_match(const Json& j, const std::vector<float>& logits, int64_t vocab, const std::string& what,
                                double rel = 1e-3, bool argmax = true) {
  double worst_share = 0;
  for (size_t t = 0; t < j["prompt"].size(); t++) {
    const float* row = logits.data() + t * vocab;
    auto [worst, tol] = position_diff(j, row, t, rel);
    worst_share = std::max(worst_share, worst / (tol / rel));
    EXPECT_LE(worst, tol) << what << ": position " << t;
    if (argmax) {
      EXPECT_EQ(std::max_element(row, row + vocab) - row, j["ref_argmax"][t].get<int64_t>()) << what << ": argmax at " << t;
    }
  }
  std::printf("%s: max |diff| = %.2e x max|logit|\n", what.c_str(), worst_share);
}

}  // namespace kvad::test
