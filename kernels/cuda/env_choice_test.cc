#include "kernels/cuda/env_choice.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace mxserve::kernels::cuda::internal {
namespace {

constexpr const char* kVar = "MXSERVE_ENV_CHOICE_TEST";

class EnvChoiceTest : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv(kVar); }
  static int Choice() { return EnvChoice(kVar, {"default", "tma", "persist"}); }
};

TEST_F(EnvChoiceTest, UnsetEmptyAndDefaultAreTheFirst) {
  unsetenv(kVar);
  EXPECT_EQ(Choice(), 0);
  setenv(kVar, "", 1);
  EXPECT_EQ(Choice(), 0);
  setenv(kVar, "default", 1);
  EXPECT_EQ(Choice(), 0);
}

TEST_F(EnvChoiceTest, NamedValuesGiveTheirPosition) {
  setenv(kVar, "tma", 1);
  EXPECT_EQ(Choice(), 1);
  setenv(kVar, "persist", 1);
  EXPECT_EQ(Choice(), 2);
}

TEST_F(EnvChoiceTest, ATypoIsReportedAndRunsTheDefault) {
  for (const char* bad : {"persit", "TMA", "tma ", "persist2"}) {
    setenv(kVar, bad, 1);
    testing::internal::CaptureStderr();
    EXPECT_EQ(Choice(), 0) << bad;
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find(std::string(kVar) + "=" + bad + " is not one of default, tma, persist"), std::string::npos)
        << err;
  }
}

TEST_F(EnvChoiceTest, AKnownValuePrintsNothing) {
  setenv(kVar, "persist", 1);
  testing::internal::CaptureStderr();
  EXPECT_EQ(Choice(), 2);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

}  // namespace
}  // namespace mxserve::kernels::cuda::internal
