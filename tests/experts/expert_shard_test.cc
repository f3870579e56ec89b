// ExpertShard: loads only the asked experts, byte-exact and aligned; bad checkpoints fail with
// the tensor named.
#include "experts/expert_shard.h"

#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "core/bf16.h"
#include "core/model_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/moe/moe.h"
#include "tests/experts/test_checkpoint.h"

namespace mxserve {
namespace {

using ::testing::HasSubstr;
using testing::ExpertCheckpointSpec;

struct Loaded {
  std::unique_ptr<Checkpoint> ckpt;
  ModelConfig config;
};

Loaded Open(const std::string& dir) {
  Loaded l;
  auto config = ModelConfig::Load(dir);
  EXPECT_TRUE(config.ok()) << config.status();
  l.config = *config;
  auto ckpt = Checkpoint::Open(dir);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  l.ckpt = std::move(*ckpt);
  return l;
}

absl::Status LoadBroken(const ExpertCheckpointSpec& spec, std::vector<int> experts) {
  const std::string dir = testing::NewTempDir();
  EXPECT_TRUE(testing::WriteExpertCheckpoint(dir, spec).ok());
  Loaded l = Open(dir);
  auto shard = ExpertShard::Load(*l.ckpt, l.config, experts);
  std::filesystem::remove_all(dir);
  return shard.status();
}

TEST(ExpertShardTest, LoadsOnlyTheAskedExpertsByteExact) {
  ExpertCheckpointSpec spec;
  const std::string dir = testing::NewTempDir();
  ASSERT_TRUE(testing::WriteExpertCheckpoint(dir, spec).ok());
  Loaded l = Open(dir);
  int progress_calls = 0;
  auto shard = ExpertShard::Load(*l.ckpt, l.config, {6, 1, 4},
                                 [&](int done, int total) { ++progress_calls; EXPECT_EQ(total, spec.layers); });
  ASSERT_TRUE(shard.ok()) << shard.status();
  const ExpertShard& s = **shard;
  EXPECT_EQ(progress_calls, spec.layers);
  EXPECT_EQ(s.experts(), (std::vector<int>{1, 4, 6}));
  EXPECT_TRUE(s.Holds(4));
  EXPECT_FALSE(s.Holds(0));
  ASSERT_EQ(s.num_layers(), spec.layers);
  const int H = spec.hidden, I = spec.intermediate;
  const size_t per_expert_bytes = 2 * I * H / 2 + 2 * I * H / 32 + H * I / 2 + H * I / 32 + 4 * (2 * I + H);
  EXPECT_EQ(s.resident_bytes(), spec.layers * 3 * per_expert_bytes);
  for (int layer = 0; layer < spec.layers; ++layer) {
    const kernels::MoeLayer& m = s.layer(layer);
    EXPECT_EQ(m.hidden, H);
    EXPECT_EQ(m.intermediate, I);
    ASSERT_EQ(static_cast<int>(m.experts.size()), spec.experts);
    const std::string p = absl::StrCat("model.layers.", layer, ".mlp.experts.");
    auto gub = l.ckpt->Get(p + "gate_up_proj_blocks");
    auto dns = l.ckpt->Get(p + "down_proj_scales");
    auto dnbias = l.ckpt->Get(p + "down_proj_bias");
    ASSERT_TRUE(gub.ok() && dns.ok() && dnbias.ok());
    for (int e = 0; e < spec.experts; ++e) {
      const bool held = e == 1 || e == 4 || e == 6;
      ASSERT_EQ(m.experts[e] != nullptr, held) << "layer " << layer << " expert " << e;
      if (!held) continue;
      const kernels::ExpertWeights& w = *m.experts[e];
      EXPECT_EQ(reinterpret_cast<uintptr_t>(w.gate_up.blocks) % 64, 0u);
      EXPECT_EQ(w.gate_up.rows, 2 * I);
      EXPECT_EQ(w.gate_up.cols, H);
      EXPECT_EQ(w.down.rows, H);
      EXPECT_EQ(w.down.cols, I);
      const size_t gub_per = 2 * I * H / 2, dns_per = H * I / 32;
      EXPECT_EQ(std::memcmp(w.gate_up.blocks, gub->data + e * gub_per, gub_per), 0);
      EXPECT_EQ(std::memcmp(w.down.scales, dns->data + e * dns_per, dns_per), 0);
      uint16_t h;
      std::memcpy(&h, dnbias->data + (e * H + 5) * 2, 2);
      EXPECT_EQ(w.down_bias[5], Bf16ToFloat(h));
    }
  }
  // The weights stay valid without the checkpoint (they were copied, not mapped).
  l.ckpt.reset();
  const int T = 3, k = 2;
  std::vector<float> x = testing::RandomFloats(T * H, 5);
  std::vector<int32_t> ids = {1, 4, 6, -1, 4, 1};
  std::vector<float> wts = {0.5f, 0.5f, 1.0f, 0.3f, 0.7f, 0.3f};
  ExpertBatch batch{{T, k, x.data(), ids.data(), wts.data()}, 1, H};
  std::vector<float> fast(T * H), ref(T * H);
  ASSERT_TRUE(s.Run(batch, fast.data(), nullptr).ok());
  ASSERT_TRUE(kernels::MoeForwardReference(s.layer(1), batch, ref.data()).ok());
  for (int i = 0; i < T * H; ++i) EXPECT_NEAR(fast[i], ref[i], 1e-4f + 1e-4f * std::abs(ref[i]));
  ExpertBatch past_last = batch;
  past_last.layer = spec.layers;
  EXPECT_THAT(s.Run(past_last, fast.data(), nullptr).message(), HasSubstr("out of range"));
  ExpertBatch narrow = batch;
  narrow.hidden = H / 2;
  EXPECT_THAT(s.Run(narrow, fast.data(), nullptr).message(), HasSubstr("does not match the model's"));
  std::filesystem::remove_all(dir);
}

TEST(ExpertShardTest, MissingTensorIsNamed) {
  ExpertCheckpointSpec spec;
  spec.drop_tensor = "model.layers.1.mlp.experts.down_proj_bias";
  absl::Status s = LoadBroken(spec, {0, 1});
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("model.layers.1.mlp.experts.down_proj_bias"));
}

TEST(ExpertShardTest, WrongShapeIsNamed) {
  ExpertCheckpointSpec spec;
  spec.reshape_tensor = "model.layers.2.mlp.experts.gate_up_proj_scales";
  absl::Status s = LoadBroken(spec, {3});
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("model.layers.2.mlp.experts.gate_up_proj_scales"));
}

TEST(ExpertShardTest, NanScaleIsRejectedNamingTensorAndExpert) {
  ExpertCheckpointSpec spec;
  spec.nan_scale_tensor = "model.layers.0.mlp.experts.down_proj_scales";
  spec.nan_scale_expert = 5;
  absl::Status s = LoadBroken(spec, {4, 5});
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("model.layers.0.mlp.experts.down_proj_scales"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("expert 5"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("0xFF"));
  // A worker that does not hold the corrupt expert loads fine.
  EXPECT_TRUE(LoadBroken(spec, {0, 1, 2}).ok());
}

TEST(ExpertShardTest, RejectsBadExpertIds) {
  ExpertCheckpointSpec spec;
  EXPECT_THAT(std::string(LoadBroken(spec, {0, 8}).message()), HasSubstr("out of range"));
  EXPECT_THAT(std::string(LoadBroken(spec, {2, 2}).message()), HasSubstr("repeated"));
}

}  // namespace
}  // namespace mxserve
