#include "coordinator/device_choice.h"

#include <gtest/gtest.h>

namespace mxserve {
namespace {

TEST(ChooseDevice, AutoTakesTheFirstGpuElseTheCpu) {
  auto a = ChooseDevice("auto", 2, true);
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->gpu);
  EXPECT_EQ(a->ordinal, 0);
  EXPECT_EQ(a->ToString(), "cuda:0");
  auto c = ChooseDevice("auto", 0, true);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->gpu);
  EXPECT_EQ(c->ToString(), "cpu");
  auto n = ChooseDevice("auto", 0, false);
  ASSERT_TRUE(n.ok());
  EXPECT_FALSE(n->gpu);
}

TEST(ChooseDevice, NamedDevices) {
  auto c = ChooseDevice("cpu", 4, true);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->gpu);
  auto g = ChooseDevice("cuda:3", 4, true);
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(g->gpu);
  EXPECT_EQ(g->ordinal, 3);
  auto z = ChooseDevice("cuda", 1, true);
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(z->ToString(), "cuda:0");
}

TEST(ChooseDevice, RefusesWhatCannotRunNamingTheFlag) {
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:x", "CUDA:0", "cuda:0 ", ""}) {
    auto r = ChooseDevice(bad, 8, true);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("--device"), absl::string_view::npos) << r.status();
  }
  auto beyond = ChooseDevice("cuda:2", 2, true);
  ASSERT_FALSE(beyond.ok());
  EXPECT_NE(beyond.status().message().find("2 CUDA device"), absl::string_view::npos);
  auto no_cuda = ChooseDevice("cuda:0", 0, false);
  ASSERT_FALSE(no_cuda.ok());
  EXPECT_NE(no_cuda.status().message().find("no CUDA"), absl::string_view::npos);
}

}  // namespace
}  // namespace mxserve
