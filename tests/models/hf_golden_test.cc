// Our gpt-oss logits against HF transformers' own (data/hf_tiny, recorded on the GPU machine by
// tools/golden/hf_logits.py): one shot, and prefill + one-token decode through the paged KV cache.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <numeric>
#include <string>
#include <vector>

#include "coordinator/models/cpu_model_runner.h"
#include "coordinator/models/model.h"
#include "core/thread_pool.h"
#include "gtest/gtest.h"
#include "tests/models/tiny_gpt_oss.h"

namespace mxserve::testing {
namespace {

const std::string kDir = std::string(MXSERVE_MODELS_TESTDATA) + "/hf_tiny";

template <typename T>
std::vector<T> ReadRaw(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<T> v(bytes.size() / sizeof(T));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(T));
  return v;
}

int Argmax(const double* v, int n) { return static_cast<int>(std::max_element(v, v + n) - v); }

TEST(HfGolden, TinyLogitsMatchTransformers) {
  auto cfg = ModelConfig::Load(kDir);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  auto ck = Checkpoint::Open(kDir);
  ASSERT_TRUE(ck.ok()) << ck.status();
  const auto tokens = ReadRaw<int32_t>(kDir + "/tokens.i32");
  const auto hf_f = ReadRaw<float>(kDir + "/hf_logits.f32");
  const int V = cfg->vocab_size, T = static_cast<int>(tokens.size());
  ASSERT_EQ(T, 40);
  ASSERT_EQ(hf_f.size(), static_cast<size_t>(T) * V);
  const std::vector<double> hf(hf_f.begin(), hf_f.end());
  auto ref = ReferenceGptOss::Load(*cfg, **ck);
  ASSERT_TRUE(ref.ok()) << ref.status();
  NaiveMoeExecutor moe(&*ref);
  ThreadPool pool(2);
  auto model = CreateCausalLM(*cfg, **ck, &moe, &pool);
  ASSERT_TRUE(model.ok()) << model.status();
  auto runner = CpuModelRunner::Create(std::move(*model), 32, 8, 64);
  ASSERT_TRUE(runner.ok()) << runner.status();

  SequenceChunk c;
  c.seq_id = 1;
  c.tokens = tokens;
  c.block_table = {7, 3, 12, 0, 30};
  c.all_logits = true;
  auto out = (*runner)->Run(ForwardBatch{{c}});
  ASSERT_TRUE(out.ok()) << out.status();
  const std::vector<double> ours(out->logits.begin(), out->logits.end());
  const double err = RelL2(ours, hf);
  EXPECT_LE(err, 1e-5);  // issue 3 asks for 1e-4; recorded 1.2e-6
  RecordProperty("rel_l2_vs_hf", std::to_string(err));
  for (int t = 0; t < T; ++t) {
    EXPECT_EQ(Argmax(&ours[t * V], V), Argmax(&hf[t * V], V)) << "position " << t;
  }
  // The float64 twin agrees with HF as well (it shares nothing with the fp32 path but the spec).
  std::vector<double> twin;
  for (const auto& row : ref->Logits(tokens)) twin.insert(twin.end(), row.begin(), row.end());
  EXPECT_LE(RelL2(twin, hf), 1e-5);

  // Prefill 23 tokens of another sequence, then decode the rest one at a time.
  SequenceChunk p;
  p.seq_id = 2;
  p.tokens.assign(tokens.begin(), tokens.begin() + 23);
  p.block_table = {1, 2, 4, 5, 6};
  auto pre = (*runner)->Run(ForwardBatch{{p}});
  ASSERT_TRUE(pre.ok()) << pre.status();
  std::vector<double> row(pre->logits.begin(), pre->logits.end());
  EXPECT_LE(RelL2(row, std::vector<double>(hf.begin() + 22 * V, hf.begin() + 23 * V)), 1e-5);
  for (int t = 23; t < T; ++t) {
    SequenceChunk d;
    d.seq_id = 2;
    d.tokens = {tokens[t]};
    d.start_pos = t;
    d.block_table = p.block_table;
    auto o = (*runner)->Run(ForwardBatch{{d}});
    ASSERT_TRUE(o.ok()) << o.status();
    row.assign(o->logits.begin(), o->logits.end());
    EXPECT_LE(RelL2(row, std::vector<double>(hf.begin() + t * V, hf.begin() + (t + 1) * V)), 1e-5)
        << "position " << t;
    EXPECT_EQ(Argmax(row.data(), V), Argmax(&hf[t * V], V)) << "position " << t;
  }
}

}  // namespace
}  // namespace mxserve::testing
