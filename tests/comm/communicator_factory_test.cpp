// lib/comm in one process: the backend choice and its errors, config differences, and the
// rendezvous and config check with ranks as threads over a real TCP store on loopback (the
// multi-process versions are in multirank_test.cpp).
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <torch/torch.h>
#include <torch/version.h>

#include <future>

#include "comm/make_communicator.h"
#include "comm/nccl_communicator.h"
#include "comm/rendezvous.h"
#include "test_support.h"
#include "util/build_info.h"
#include "util/torch_version.h"

namespace ft::comm {
namespace {

using test::free_port;

RankEnv env_of(int rank, int world, int port) {
  RankEnv e;
  e.rank = rank;
  e.local_rank = rank;
  e.world_size = world;
  e.local_world_size = world;
  e.master_port = port;
  e.source = "torchrun";
  return e;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(MakeCommunicator, BackendChoiceAndErrors) {
  const RankEnv one;
  EXPECT_EQ(make_communicator("auto", torch::kCPU, one, nullptr, 10)->backend(), "single");
  EXPECT_EQ(make_communicator("gloo", torch::kCPU, one, nullptr, 10)->backend(), "single");
  EXPECT_FT_ERROR(make_communicator("mpi", torch::kCPU, one, nullptr, 10),
                  "parallel.backend: expected auto, gloo or nccl, got \"mpi\"");
  EXPECT_FT_ERROR(make_communicator("gloo", torch::Device(torch::kCUDA, 0), one, nullptr, 10),
                  "parallel.backend gloo takes CPU tensors in this build, but the device is cuda:0: use nccl (or auto)");
  if (nccl_compiled()) {
    // The message names the build: its LibTorch, CUDA or not, and the fix.
    EXPECT_FT_ERROR(make_communicator("nccl", torch::kCPU, one, nullptr, 10),
                    std::string("parallel.backend nccl needs a CUDA device, but the device is cpu: this build (LibTorch ") +
                        TORCH_VERSION);
    EXPECT_FT_ERROR(check_backend("nccl", torch::kCPU),
                    FT_TORCH_CUDA ? " sees no GPU (check nvidia-smi and CUDA_VISIBLE_DEVICES); or use gloo (or auto) for CPU training"
                                  : " cannot use one (scripts/build.sh --libtorch pip builds against a CUDA LibTorch); or use "
                                    "gloo (or auto) for CPU training");
    EXPECT_EQ(make_communicator("auto", torch::Device(torch::kCUDA, 0), one, nullptr, 10)->backend(), "single");
  } else {
    EXPECT_FT_ERROR(make_communicator("nccl", torch::kCPU, one, nullptr, 10),
                    "parallel.backend nccl on device cpu, but this build (LibTorch");
    EXPECT_FT_ERROR(make_communicator("auto", torch::Device(torch::kCUDA, 0), one, nullptr, 10),
                    "no NCCL communicator) has no NCCL: rebuild where CMake finds NCCL");
  }
  EXPECT_FT_ERROR(make_communicator("gloo", torch::kCPU, env_of(0, 2, 1), nullptr, 10),
                  "make_communicator for rank 0 of 2: no store (rendezvous() first)");
}

#ifdef FT_WITH_NCCL
TEST(MakeCommunicator, NcclWithoutGpuSaysSo) {
  if (torch::cuda::device_count() > 0) GTEST_SKIP() << "a GPU is visible";
  const int port = free_port();
  auto store = Store::connect(env_of(0, 2, port), 5);  // rank 0 hosts; nobody else needed
  EXPECT_FT_ERROR(make_nccl_communicator(env_of(0, 2, port), store, 0, 5),
                  "rank 0 wants cuda:0 for NCCL but no CUDA device is usable here");
  // parallel.backend nccl in a world of one is a real NCCL communicator, so it says the same.
  EXPECT_FT_ERROR(make_communicator("nccl", torch::Device(torch::kCUDA, 0), RankEnv{}, nullptr, 5),
                  "rank 0 wants cuda:0 for NCCL but no CUDA device is usable here");
}
#endif

TEST(ConfigDifferences, FullPathsBothValuesAndAbsentKeys) {
  const Json here = {{"run_dir", "a"},
                     {"train", {{"lr", 0.001}, {"epochs", 1}}},
                     {"lora", {{"r", 8}, {"target_modules", {"q_proj"}}}}};
  const Json there = {{"run_dir", "a"},
                      {"train", {{"lr", 0.002}, {"epochs", 1}}},
                      {"lora", {{"target_modules", {"q_proj", "v_proj"}}}},
                      {"extra", true}};
  const auto d = config_differences(here, there);
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[0].key, "extra");
  EXPECT_EQ(d[0].here, "absent");
  EXPECT_EQ(d[0].there, "true");
  EXPECT_EQ(d[1].key, "lora.r");
  EXPECT_EQ(d[1].there, "absent");
  EXPECT_EQ(d[2].key, "lora.target_modules");
  EXPECT_EQ(d[2].here, "[\"q_proj\"]");
  EXPECT_EQ(d[2].there, "[\"q_proj\",\"v_proj\"]");
  EXPECT_EQ(d[3].key, "train.lr");
  EXPECT_EQ(d[3].here, "0.001");
  EXPECT_EQ(d[3].there, "0.002");
  EXPECT_TRUE(config_differences(here, here).empty());
}

TEST(Rendezvous, WorldOfOneNeedsNoStore) {
  const RankEnv one;
  EXPECT_EQ(rendezvous(one, 1), nullptr);
  check_same_config(nullptr, one, Json::object(), 1);  // nothing to check
}

// Each "rank" returns its store, so that rank 0's server outlives the other ranks' last calls.
// Runs run(0) and run(1) at once, as two ranks would, and returns what each returned.
template <typename F>
auto on_two_ranks_at_once(F run) {
  auto r0 = std::async(std::launch::async, run, 0);
  auto r1 = std::async(std::launch::async, run, 1);
  auto first = r0.get();
  return std::make_pair(std::move(first), r1.get());
}

struct Outcome {
  std::shared_ptr<Store> store;
  std::string error;
};

template <typename F>
Outcome outcome_of(F&& f) {
  Outcome out;
  try {
    out.store = f();
  } catch (const Error& e) {
    out.error = e.what();
  }
  return out;
}

// torchrun's agent hosts one store for every start of the workers: here a store hosted by a
// third party ("the agent", a rank-0 Store of another world) that two starts of two ranks use as
// clients. Each start's keys live under its attempt, so the second start does not find the first
// one's check-ins ("checked in twice").
TEST(Rendezvous, TorchrunAgentStoreServesEveryRestart) {
  const int port = free_port();
  auto agent_env = [&](int rank, int restart) {
    RankEnv e = env_of(rank, 2, port);
    e.agent_store = true;
    e.restart_count = restart;
    return e;
  };
#if FT_TORCH_AT_LEAST(2, 0)
  RankEnv host = env_of(0, 1, port);
  host.world_size = 2;  // hosts the store only
  auto agent = Store::connect(host, 10);
  for (int restart : {0, 1}) {
    SCOPED_TRACE(restart);
    const auto [o0, o1] = on_two_ranks_at_once(
        [&](int rank) { return outcome_of([&] { return rendezvous(agent_env(rank, restart), 10); }); });
    EXPECT_EQ(o0.error, "");
    EXPECT_EQ(o1.error, "");
    ASSERT_TRUE(o0.store && o1.store);
    EXPECT_FALSE(o0.store->is_server());  // rank 0 is a client of the agent's store too
    EXPECT_EQ(o0.store->hosted_by(), "torchrun's agent");
  }
  agent.reset();
  // Announced but not there: the error says whose store it is and what to check.
  EXPECT_FT_ERROR(Store::connect(agent_env(0, 0), 0.5), "could not reach torchrun's agent store at 127.0.0.1:");
#else
  // LibTorch 1.x's client cannot talk to a PyTorch 2.x store: refused before connecting.
  EXPECT_FT_ERROR(Store::connect(agent_env(1, 0), 0.5),
                  "whose store client cannot talk to a PyTorch 2.x store (it would wait forever)");
#endif
}

TEST(Rendezvous, ThreadsMeetAndAgree) {
  const int port = free_port();
  const Json config = {{"train", {{"lr", 0.001}}}};
  const auto [o0, o1] = on_two_ranks_at_once([&](int rank) {
    return outcome_of([&] {
      auto store = rendezvous(env_of(rank, 2, port), 10);
      check_same_config(store, env_of(rank, 2, port), config, 10);
      return store;
    });
  });
  EXPECT_EQ(o0.error, "");
  EXPECT_EQ(o1.error, "");
  ASSERT_TRUE(o0.store && o1.store);
  EXPECT_TRUE(o0.store->is_server());
  EXPECT_EQ(o1.store->address(), "127.0.0.1:" + std::to_string(port));
}

TEST(Rendezvous, ConfigMismatchFailsEveryRankNamingTheKey) {
  const int port = free_port();
  std::shared_ptr<Store> stores[2];
  auto run = [&](int rank) {
    return error_of([&] {
      stores[rank] = rendezvous(env_of(rank, 2, port), 10);
      const Json config = {{"train", {{"lr", rank == 0 ? 0.001 : 0.002}, {"epochs", 1}}}};
      check_same_config(stores[rank], env_of(rank, 2, port), config, 10);
    });
  };
  const auto [error0, error1] = on_two_ranks_at_once(run);
  EXPECT_EQ(error1,
            "rank 1 runs a different config than rank 0 (every rank must run the same one): train.lr: 0.002 here, "
            "0.001 on rank 0. Start every rank with the same config file and the same --set overrides");
  EXPECT_EQ(error0,
            "rank 1 runs a different config than rank 0: train.lr: 0.002 on rank 1, 0.001 on rank 0. Every rank "
            "stops; start them all with the same config file and the same --set overrides");
}

TEST(Rendezvous, MissingRankTimesOutNamingWhoArrived) {
  const int port = free_port();
  const std::string message = error_of([&] { rendezvous(env_of(0, 3, port), 0.5); });
  EXPECT_NE(message.find(str("rendezvous at 127.0.0.1:", port, " timed out after 0.5 s on rank 0: 1 of 3 ranks arrived "
                             "(missing: ranks 1, 2). Check that all 3 ranks were started (WORLD_SIZE=3 on each) with "
                             "the same MASTER_ADDR=127.0.0.1 and MASTER_PORT=",
                             port)),
            std::string::npos)
      << message;
  EXPECT_NE(message.find(str("no firewall blocks port ", port)), std::string::npos) << message;
}

TEST(Rendezvous, UnreachableStoreSaysWhatToCheck) {
  const int port = free_port();
  EXPECT_FT_ERROR(rendezvous(env_of(1, 2, port), 0.5),
                  str("rank 1 of 2 could not reach the rendezvous store at 127.0.0.1:", port,
                      " within 0.5 s (connection refused: nothing listens there yet), so it cannot tell how many of "
                      "the 2 ranks arrived. Check that rank 0 is running"));
  RankEnv bad = env_of(1, 2, port);
  bad.master_addr = "no-such-host.invalid";
  EXPECT_FT_ERROR(rendezvous(bad, 0.3), "(MASTER_ADDR=no-such-host.invalid does not resolve");
}

TEST(Rendezvous, PortInUseOnRankZero) {
  int holder = -1;
  const int port = free_port(&holder);
  EXPECT_FT_ERROR(rendezvous(env_of(0, 2, port), 2),
                  str("rank 0 cannot host the rendezvous store on port ", port,
                      ": the port is already in use (another run, or another program, listens on it). Pick another "
                      "MASTER_PORT"));
  ::close(holder);
}

TEST(Rendezvous, RankStartedTwice) {
  const int port = free_port();
  auto run = [&](int rank) { return outcome_of([&] { return rendezvous(env_of(rank, 2, port), 3); }); };
  auto r0 = std::async(std::launch::async, run, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto a = std::async(std::launch::async, run, 1);
  auto b = std::async(std::launch::async, run, 1);
  const Outcome o0 = r0.get();
  const Outcome oa = a.get();
  const Outcome ob = b.get();
  EXPECT_EQ(o0.error, "");
  EXPECT_TRUE(oa.error.empty() != ob.error.empty()) << oa.error << "\n" << ob.error;
  EXPECT_NE((oa.error + ob.error).find(str("rank 1 checked in at 127.0.0.1:", port,
                                           " twice: two processes were started with RANK=1, or another run uses the "
                                           "same MASTER_PORT=",
                                           port)),
            std::string::npos)
      << oa.error << ob.error;
}

}  // namespace
}  // namespace ft::comm
