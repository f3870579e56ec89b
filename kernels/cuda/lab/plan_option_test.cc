// The lab's MXSERVE_PLAN parser: each key sets its field, defaults stay production's, and a bad
// key or value is an error naming it.
#include "kernels/cuda/lab/plan_option.h"

#include "gtest/gtest.h"
#include "kernels/cuda/moe_cuda_plan.h"

namespace mxserve::kernels::cuda::lab {
namespace {

TEST(PlanOptionTest, EmptyIsTheDefaults) {
  auto v = ParsePlanOption("");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->forced_spec, -1);
  EXPECT_TRUE(v->mix);
  EXPECT_TRUE(v->pdl);
  EXPECT_EQ(v->kst_pair, 2);
  EXPECT_FALSE(v->fused.off);
  EXPECT_EQ(v->lab_gemm, nullptr);
}

TEST(PlanOptionTest, KeysSetTheirFields) {
  auto v = ParsePlanOption("path=decode24+decode16,mix=serial,decode=ring,pdl=0,kst_pair=fixed,fused=6x2w24,"
                           "fused_probe=stamps,wgmma_cfg=nc4,kst_grid=900,fused_down=default");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->forced_spec, internal::SpecNamed("decode24+decode16"));
  EXPECT_TRUE(v->mix);
  EXPECT_TRUE(v->mix_serial);
  EXPECT_EQ(v->decode_pin, 3);
  EXPECT_FALSE(v->pdl);
  EXPECT_EQ(v->kst_pair, 1);
  EXPECT_EQ(v->fused.parts, 6);
  EXPECT_EQ(v->fused.warps, 24);
  EXPECT_EQ(v->fused_probe, 7);
  EXPECT_EQ(v->wgmma_cfg, 7);
  EXPECT_EQ(v->kst_grid_pm, 900);
  EXPECT_EQ(v->fused_down_pct, -1);
  EXPECT_TRUE(ParsePlanOption("fused=off")->fused.off);
  EXPECT_FALSE(ParsePlanOption("mix=off")->mix);
}

TEST(PlanOptionTest, BadInputNamesWhatIsWrong) {
  for (const char* bad : {"mix", "nokey=1", "mix=sideways", "path=wgmma7", "fused=5x9", "pdl=0,decode=kst5"}) {
    auto v = ParsePlanOption(bad);
    ASSERT_FALSE(v.ok()) << bad;
    EXPECT_NE(v.status().message().find("MXSERVE_PLAN"), std::string_view::npos) << bad;
  }
  EXPECT_NE(ParsePlanOption("mix=sideways").status().message().find("serial"), std::string_view::npos);
  EXPECT_NE(PlanOptionHelp().find("kst_cfg="), std::string::npos);
}

}  // namespace
}  // namespace mxserve::kernels::cuda::lab
