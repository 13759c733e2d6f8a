// The start-up GPU findings, decided on plain facts (no GPU needed).
#include <gtest/gtest.h>

#include "gpu/gpu_checks.h"

namespace ft::gpu {
namespace {

comm::RankEnv local(int world) {
  comm::RankEnv env;
  env.world_size = env.local_world_size = world;
  return env;
}

TEST(GpuChecks, NoGpuNothingToSay) { EXPECT_TRUE(gpu_findings(GpuFacts{}, local(2)).empty()); }

TEST(GpuChecks, TwoRanksOnOneGpuIsFatal) {
  GpuFacts f{1, {"NVIDIA H200"}, {{true}}, false, {}};
  auto out = gpu_findings(f, local(2));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].fatal);
  EXPECT_NE(out[0].message.find("two ranks would share a GPU"), std::string::npos) << out[0].message;
  EXPECT_NE(out[0].message.find("--nproc_per_node 1"), std::string::npos);
}

TEST(GpuChecks, Geforce40WithoutP2pNeedsNcclP2pDisable) {
  GpuFacts f{2, {"NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090"}, {{true, false}, {false, true}}, false, {}};
  auto out = gpu_findings(f, local(2));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_FALSE(out[0].fatal);
  EXPECT_NE(out[0].message.find("export NCCL_P2P_DISABLE=1"), std::string::npos) << out[0].message;
  f.nccl_p2p_disable_set = true;
  EXPECT_TRUE(gpu_findings(f, local(2)).empty());
  f = GpuFacts{2, {"NVIDIA A100", "NVIDIA A100"}, {{true, false}, {false, true}}, false, {}};
  EXPECT_TRUE(gpu_findings(f, local(2)).empty());  // not a GeForce: NCCL copes
}

}  // namespace
}  // namespace ft::gpu
