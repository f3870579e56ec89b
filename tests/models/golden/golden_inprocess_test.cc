// Our gpt-oss model in one process (dense path + the in-process expert router with the real
// MXFP4 kernels, as `--local-workers 0` runs it) against HF transformers on the golden fixtures
// of tests/data/golden/: logits of every prompt position and generation step (one pass, and
// prefill + decode through the paged KV cache), and greedy generations token for token.
#include <memory>
#include <string>
#include <vector>

#include "coordinator/models/cpu_model_runner.h"
#include "coordinator/models/model.h"
#include "coordinator/router/router_factory.h"
#include "core/model_config.h"
#include "core/safetensors.h"
#include "core/thread_pool.h"
#include "gtest/gtest.h"
#include "tests/models/golden/golden_fixture.h"

namespace mxserve::testing {
namespace {

constexpr double kMaxRelL2 = 1e-4;  // issue 3's gate, fp32

class HfGoldenFixtures : public ::testing::TestWithParam<std::string> {};

TEST_P(HfGoldenFixtures, InProcessLogitsAndGreedyMatchTransformers) {
  const GoldenFixture fx = LoadGolden(GetParam());
  ASSERT_EQ(fx.prompts.size(), 3u) << fx.dir;
  auto cfg = ModelConfig::Load(fx.dir);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  ASSERT_EQ(cfg->vocab_size, fx.vocab);
  auto ck = Checkpoint::Open(fx.dir);
  ASSERT_TRUE(ck.ok()) << ck.status();
  auto pool = std::make_shared<ThreadPool>(2);
  auto router = MakeInProcessRouter(**ck, *cfg, pool);
  ASSERT_TRUE(router.ok()) << router.status();
  auto model = CreateCausalLM(*cfg, **ck, router->get(), pool.get());
  ASSERT_TRUE(model.ok()) << model.status();
  auto runner = CpuModelRunner::Create(std::move(*model), /*num_blocks=*/32, /*block_size=*/4,
                                       /*max_model_len=*/64);
  ASSERT_TRUE(runner.ok()) << runner.status();
  const int V = fx.vocab;
  const std::vector<int32_t> blocks = {9, 2, 17, 5, 30, 11, 0, 23, 14, 6, 28, 3, 19, 8};  // 56 slots
  double worst = 0;
  for (size_t pi = 0; pi < fx.prompts.size(); ++pi) {
    const GoldenPrompt& g = fx.prompts[pi];
    SCOPED_TRACE("prompt " + std::to_string(pi));
    const std::vector<int32_t> seq = g.Sequence();
    ASSERT_EQ(static_cast<int>(seq.size()), g.rows);

    // One pass over prompt + greedy[:-1]: every row against HF's.
    SequenceChunk all;
    all.seq_id = 100 + pi;
    all.tokens = seq;
    all.block_table = blocks;
    all.all_logits = true;
    auto out = (*runner)->Run(ForwardBatch{{all}});
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->logits.size(), g.logits.size());
    const double err = RelL2F(out->logits.data(), g.logits.data(), g.logits.size());
    worst = std::max(worst, err);
    EXPECT_LE(err, kMaxRelL2);
    for (int r = 0; r < g.rows; ++r) {
      EXPECT_EQ(ArgmaxF(&out->logits[r * V], V), ArgmaxF(&g.logits[r * V], V)) << "row " << r;
    }

    // Greedy: prefill the prompt, then decode one token at a time through the KV cache.
    std::vector<int32_t> gen;
    SequenceChunk pre;
    pre.seq_id = 200 + pi;
    pre.tokens = g.prompt;
    pre.block_table = blocks;
    auto o = (*runner)->Run(ForwardBatch{{pre}});
    ASSERT_TRUE(o.ok()) << o.status();
    for (size_t step = 0; step < g.greedy.size(); ++step) {
      const int row = static_cast<int>(g.prompt.size() + step) - 1;
      EXPECT_LE(RelL2F(o->logits.data(), &g.logits[row * V], V), kMaxRelL2) << "step " << step;
      gen.push_back(ArgmaxF(o->logits.data(), V));
      if (step + 1 == g.greedy.size()) break;
      SequenceChunk d;
      d.seq_id = pre.seq_id;
      d.tokens = {gen.back()};
      d.start_pos = row + 1;
      d.block_table = blocks;
      o = (*runner)->Run(ForwardBatch{{d}});
      ASSERT_TRUE(o.ok()) << o.status();
    }
    EXPECT_EQ(gen, g.greedy);
  }
  RecordProperty("worst_rel_l2_vs_hf", std::to_string(worst));
}

INSTANTIATE_TEST_SUITE_P(Configs, HfGoldenFixtures, ::testing::ValuesIn(GoldenNames()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace mxserve::testing
