// CountVisibleGpus over a stand-in /dev (symlinks to /dev/null are character devices) and
// CUDA_VISIBLE_DEVICES values as the CUDA runtime reads them.
#include "core/visible_gpus.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace mxserve {
namespace {

class VisibleGpusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (std::filesystem::temp_directory_path() / "mxserve-dev-XXXXXX").string();
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // A character device named name (a link to /dev/null).
  void Node(const std::string& name) { std::filesystem::create_symlink("/dev/null", dir_ + "/" + name); }
  int Count(std::optional<std::string> visible) {
    return CountVisibleGpus(GpuProbe{.cuda_visible_devices = std::move(visible), .dev_dir = dir_});
  }
  std::string dir_;
};

TEST_F(VisibleGpusTest, CountsNvidiaNodesOnly) {
  EXPECT_EQ(Count(std::nullopt), 0);
  for (const char* n : {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", "nvidia"})
    Node(n);
  EXPECT_EQ(Count(std::nullopt), 0);
  std::ofstream(dir_ + "/nvidia9") << "a regular file is no device";
  std::filesystem::create_directory(dir_ + "/nvidia8");
  EXPECT_EQ(Count(std::nullopt), 0);
  Node("nvidia0");
  Node("nvidia3");  // a container given GPUs 0 and 3 still calls them cuda:0 and cuda:1
  EXPECT_EQ(Count(std::nullopt), 2);
}

TEST_F(VisibleGpusTest, CudaVisibleDevicesLimitsTheNodes) {
  for (int i = 0; i < 4; ++i) Node("nvidia" + std::to_string(i));
  EXPECT_EQ(Count(std::nullopt), 4);
  EXPECT_EQ(Count("2"), 1);
  EXPECT_EQ(Count("1,3"), 2);
  EXPECT_EQ(Count(" 1, 3 "), 2);
  EXPECT_EQ(Count("GPU-8f2c1a4e-0000-0000-0000-000000000000,MIG-4d1c"), 2);
  EXPECT_EQ(Count(""), 0);
  EXPECT_EQ(Count("-1"), 0);
  EXPECT_EQ(Count("0,1,-1,2"), 2);   // the runtime stops at the first invalid entry
  EXPECT_EQ(Count("0,bogus,2"), 1);
  EXPECT_EQ(Count("0,1,2,3,4,5,6,7"), 4);  // no more than the host has
}

TEST_F(VisibleGpusTest, NoNodesMeansNoGpuWhateverTheVariableSays) {
  EXPECT_EQ(Count("0,1"), 0);
  EXPECT_EQ(CountVisibleGpus(GpuProbe{.cuda_visible_devices = "0", .dev_dir = dir_ + "/missing"}), 0);
}

TEST(GpuProbeTest, FromEnvironmentReadsTheVariable) {
  setenv("CUDA_VISIBLE_DEVICES", "1,0", 1);
  EXPECT_EQ(GpuProbe::FromEnvironment().cuda_visible_devices, "1,0");
  unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_FALSE(GpuProbe::FromEnvironment().cuda_visible_devices.has_value());
  EXPECT_EQ(GpuProbe::FromEnvironment().dev_dir, "/dev");
}

}  // namespace
}  // namespace mxserve
