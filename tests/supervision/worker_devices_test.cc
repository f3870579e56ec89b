// --worker-devices: parsing (a bad entry is named), the default from the host's GPUs, and the
// round-robin assignment, compared with the obvious formula on random hosts and lists.
#include "coordinator/supervision/worker_devices.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "core/visible_gpus.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mxserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(WorkerDevicesTest, ParsesCpuAndCudaEntries) {
  auto d = ParseWorkerDevices("cuda:0,cuda:1");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_THAT(*d, ElementsAre("cuda:0", "cuda:1"));
  d = ParseWorkerDevices("cpu");
  ASSERT_TRUE(d.ok());
  EXPECT_THAT(*d, ElementsAre("cpu"));
  d = ParseWorkerDevices(" cuda:3 , cpu,cuda:007 ");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_THAT(*d, ElementsAre("cuda:3", "cpu", "cuda:7"));
}

TEST(WorkerDevicesTest, BadEntryIsNamed) {
  for (const char* bad : {"gpu0", "cuda:", "cuda:-1", "cuda:+1", "cuda:1x", "CPU", "cuda",
                          "cuda:99999999999", "cuda: 1", "cuda:0x1"}) {
    auto d = ParseWorkerDevices(absl::StrCat("cuda:0,", bad));
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(Message(d.status()), HasSubstr(absl::StrCat("'", bad, "'")));
    EXPECT_THAT(Message(d.status()), HasSubstr("entry 1"));
    EXPECT_THAT(Message(d.status()), HasSubstr("--worker-devices"));
  }
  for (const char* empty : {"", ",", "cuda:0,", ",cpu", "cuda:0,,cuda:1"}) {
    auto d = ParseWorkerDevices(empty);
    ASSERT_FALSE(d.ok()) << "'" << empty << "'";
    EXPECT_THAT(Message(d.status()), HasSubstr("''"));
  }
}

TEST(WorkerDevicesTest, DefaultIsEveryGpuButTheCoordinators) {
  EXPECT_THAT(DefaultWorkerDevices({.visible = 4, .coordinator = 0, .cuda_build = true}),
              ElementsAre("cuda:1", "cuda:2", "cuda:3"));
  EXPECT_THAT(DefaultWorkerDevices({.visible = 4, .coordinator = 2, .cuda_build = true}),
              ElementsAre("cuda:0", "cuda:1", "cuda:3"));
  // A coordinator on its CPU leaves every GPU to the workers.
  EXPECT_THAT(DefaultWorkerDevices({.visible = 2, .coordinator = -1, .cuda_build = true}),
              ElementsAre("cuda:0", "cuda:1"));
  // Its only GPU: the workers share it.
  EXPECT_THAT(DefaultWorkerDevices({.visible = 1, .coordinator = 0, .cuda_build = true}),
              ElementsAre("cuda:0"));
  // No GPU, or a build whose workers cannot use one: CPU workers.
  EXPECT_THAT(DefaultWorkerDevices({.visible = 0, .coordinator = -1, .cuda_build = true}),
              ElementsAre("cpu"));
  EXPECT_THAT(DefaultWorkerDevices({.visible = 8, .coordinator = 0, .cuda_build = false}),
              ElementsAre("cpu"));
}

TEST(WorkerDevicesTest, WorkerIGetsEntryIModuloTheList) {
  const HostGpus host{.visible = 4, .coordinator = 0, .cuda_build = true};
  auto a = AssignWorkerDevices({"cuda:0", "cuda:1"}, 5, host);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(*a, ElementsAre("cuda:0", "cuda:1", "cuda:0", "cuda:1", "cuda:0"));
  a = AssignWorkerDevices({}, 4, host);
  ASSERT_TRUE(a.ok());
  EXPECT_THAT(*a, ElementsAre("cuda:1", "cuda:2", "cuda:3", "cuda:1"));
  a = AssignWorkerDevices({"cpu"}, 2, {.visible = 0, .coordinator = -1, .cuda_build = false});
  ASSERT_TRUE(a.ok());
  EXPECT_THAT(*a, ElementsAre("cpu", "cpu"));
}

TEST(WorkerDevicesTest, GpuTheHostDoesNotShowIsRefused) {
  auto a = AssignWorkerDevices({"cuda:0", "cuda:2"}, 2, {.visible = 2, .coordinator = 0, .cuda_build = true});
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(a.status()), HasSubstr("cuda:2"));
  EXPECT_THAT(Message(a.status()), HasSubstr("2 GPU(s) (cuda:0..cuda:1)"));
  a = AssignWorkerDevices({"cuda:0"}, 1, {.visible = 0, .coordinator = -1, .cuda_build = true});
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(Message(a.status()), HasSubstr("shows 0 GPU(s)"));
  a = AssignWorkerDevices({"cpu", "cuda:0"}, 2, {.visible = 2, .coordinator = -1, .cuda_build = false});
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(Message(a.status()), HasSubstr("cuda:0: this build has no CUDA support"));
  a = AssignWorkerDevices({"tpu:0"}, 1, {.visible = 2, .coordinator = -1, .cuda_build = true});
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(Message(a.status()), HasSubstr("'tpu:0'"));
}

TEST(WorkerDevicesTest, HostGpusSayWhereTheWorkersCanGo) {
  EXPECT_EQ((HostGpus{.visible = 4, .coordinator = 0, .cuda_build = true}).ToString(),
            "4 GPU(s) visible, the coordinator on cuda:0");
  EXPECT_EQ((HostGpus{.visible = 2, .coordinator = -1, .cuda_build = true}).ToString(),
            "2 GPU(s) visible, the coordinator on cpu");
  EXPECT_EQ((HostGpus{.visible = 0, .coordinator = -1, .cuda_build = true}).ToString(),
            "no GPU visible");
  EXPECT_EQ((HostGpus{.visible = 8, .coordinator = -1, .cuda_build = false}).ToString(),
            "8 GPU(s) on this host, none for the workers: this build has no CUDA");
  // This process: a coordinator GPU the host does not show is none.
  const HostGpus here = HostGpus::ForThisProcess(/*runtime_gpus=*/2, /*coordinator_gpu=*/5);
  EXPECT_EQ(here.cuda_build, BuiltWithCuda());
  EXPECT_EQ(here.coordinator, -1);
  if (here.cuda_build) {
    EXPECT_EQ(here.visible, 2);
    EXPECT_EQ(HostGpus::ForThisProcess(2, 1).coordinator, 1);
  } else {
    EXPECT_EQ(here.visible, CountVisibleGpus(GpuProbe::FromEnvironment()));
  }
}

// The assignment against its definition, written out, on random hosts and lists.
TEST(WorkerDevicesTest, AssignmentMatchesTheRuleOnRandomHosts) {
  std::mt19937 rng(20240917);
  for (int trial = 0; trial < 500; ++trial) {
    HostGpus host{.visible = static_cast<int>(rng() % 9), .coordinator = -1,
                  .cuda_build = rng() % 4 != 0};
    if (host.visible > 0 && rng() % 3 != 0) host.coordinator = static_cast<int>(rng() % host.visible);
    const int workers = 1 + static_cast<int>(rng() % 12);
    std::vector<std::string> requested;
    if (rng() % 2 == 0 && host.cuda_build && host.visible > 0) {
      const int n = 1 + static_cast<int>(rng() % 5);
      for (int k = 0; k < n; ++k) {
        requested.push_back(rng() % 4 == 0 ? "cpu" : absl::StrCat("cuda:", rng() % host.visible));
      }
    }
    auto got = AssignWorkerDevices(requested, workers, host);
    ASSERT_TRUE(got.ok()) << got.status();
    std::vector<std::string> list = requested;
    if (list.empty()) {
      if (host.cuda_build && host.visible > 0) {
        for (int g = 0; g < host.visible; ++g)
          if (g != host.coordinator || host.visible == 1) list.push_back(absl::StrCat("cuda:", g));
      } else {
        list = {"cpu"};
      }
    }
    ASSERT_EQ(got->size(), static_cast<size_t>(workers));
    for (int i = 0; i < workers; ++i) ASSERT_EQ((*got)[i], list[i % list.size()]) << trial << " " << i;
  }
}

}  // namespace
}  // namespace mxserve
