#include <gtest/gtest.h>

#include <cmath>

#include "one_sequence.h"
#include "models/registry.h"
#include "models/synth.h"
#include "test_support.h"

using namespace kvad;

TEST(ModelsSanity, TinyForwardIsFinite) {
  for (std::string arch : {"llama", "qwen2", "qwen3", "gpt2"}) {
    SynthOptions o;
    o.arch = arch;
    o.preset = "tiny";
    o.out = test::temp_dir(arch);
    synthesize(o);
    auto m = load_model_dir(o.out, {});
    test::OneSequence st(*m);
    std::vector<int32_t> toks = {1, 2, 3, 4, 5};
    std::vector<float> logits(m->config().vocab_size);
    st.forward(toks.data(), 5, logits.data());
    float mx = 0;
    for (float l : logits) {
      ASSERT_TRUE(std::isfinite(l));
      mx = std::max(mx, std::fabs(l));
    }
    EXPECT_GT(mx, 0);
    EXPECT_EQ(st.size(), 5);
  }
}
