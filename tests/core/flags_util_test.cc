#include "core/flags_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace mxserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ParseIdList, Ranges) {
  auto a = ParseIdList("0-15", 32);
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(a->size(), 16u);
  EXPECT_EQ(a->front(), 0);
  EXPECT_EQ(a->back(), 15);
  EXPECT_THAT(*ParseIdList("0,3,5-7", 8), ElementsAre(0, 3, 5, 6, 7));
  EXPECT_THAT(*ParseIdList("7,1,3-4,1, 2", 8), ElementsAre(1, 2, 3, 4, 7));
  EXPECT_THAT(*ParseIdList("5", 6), ElementsAre(5));
  EXPECT_THAT(*ParseIdList("3-3", 6), ElementsAre(3));
}

TEST(ParseIdList, ErrorsNameTheBadPart) {
  struct Case { const char* spec; const char* part; };
  for (const Case& c : {Case{"0,x", "'x'"}, Case{"0-", "'0-'"}, Case{"5-2", "'5-2'"},
                        Case{"0,,1", "''"}, Case{"0-32", "'0-32'"}, Case{"-1", "'-1'"},
                        Case{"1,99", "'99'"}, Case{"1.5", "'1.5'"},
                        Case{"99999999999999", "'99999999999999'"}}) {
    auto r = ParseIdList(c.spec, 32);
    ASSERT_FALSE(r.ok()) << c.spec;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.part)) << c.spec;
  }
  EXPECT_FALSE(ParseIdList("", 4).ok());
  EXPECT_FALSE(ParseIdList("0", 0).ok());
}

}  // namespace
}  // namespace mxserve
