// lib/comm rank environment: torchrun's and Slurm's variables, and every error message pinned,
// since these are what a user sees when a launch script is wrong.
#include <gtest/gtest.h>

#include "comm/rank_env.h"
#include "test_support.h"

namespace ft::comm {
namespace {

EnvMap torchrun(int rank, int world, int port = 29500) {
  return {{"RANK", std::to_string(rank)},
          {"LOCAL_RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(world)},
          {"LOCAL_WORLD_SIZE", std::to_string(world)},
          {"MASTER_ADDR", "10.0.0.1"},
          {"MASTER_PORT", std::to_string(port)}};
}

EnvMap with(EnvMap env, const std::string& key, const std::string& value) {
  env[key] = value;
  return env;
}
EnvMap without(EnvMap env, const std::string& key) {
  env.erase(key);
  return env;
}

TEST(RankEnv, NothingSetIsAWorldOfOne) {
  const RankEnv e = read_rank_env(EnvMap{{"HOME", "/root"}});
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.local_rank, 0);
  EXPECT_EQ(e.local_world_size, 1);
  EXPECT_FALSE(e.distributed());
  EXPECT_EQ(e.source, "default");
  EXPECT_EQ(e.describe(), "rank 0 of 1 (local rank 0 of 1) (default: no rank variables set)");
}

TEST(RankEnv, TorchrunVariables) {
  const RankEnv e = read_rank_env(with(with(torchrun(5, 8), "LOCAL_RANK", "1"), "LOCAL_WORLD_SIZE", "4"));
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.master_addr, "10.0.0.1");
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_EQ(e.source, "torchrun");
  EXPECT_TRUE(e.distributed());
  EXPECT_EQ(e.describe(), "rank 5 of 8 (local rank 1 of 4), rendezvous at 10.0.0.1:29500 (torchrun variables)");
}

// What torchrun's elastic agent adds: it hosts the store itself, and each restart of the workers
// is an attempt with keys of its own.
TEST(RankEnv, TorchrunAgentStoreAndRestarts) {
  EnvMap env = with(with(torchrun(0, 2), "TORCHELASTIC_USE_AGENT_STORE", "True"), "TORCHELASTIC_RESTART_COUNT", "2");
  const RankEnv e = read_rank_env(env);
  EXPECT_TRUE(e.agent_store);
  EXPECT_EQ(e.restart_count, 2);
  EXPECT_EQ(e.store_prefix(), "/worker/attempt_2/");
  EXPECT_EQ(e.describe(),
            "rank 0 of 2 (local rank 0 of 2), rendezvous at 10.0.0.1:29500 (torchrun's agent store), restart 2 "
            "(torchrun variables)");
  const RankEnv own = read_rank_env(with(torchrun(1, 2), "TORCHELASTIC_USE_AGENT_STORE", "False"));
  EXPECT_FALSE(own.agent_store);
  EXPECT_EQ(own.store_prefix(), "");  // rank 0 hosts a new store at every start (ft_launch)
  EXPECT_EQ(own.restart_count, 0);

  EXPECT_FT_ERROR(read_rank_env(with(torchrun(0, 2), "TORCHELASTIC_USE_AGENT_STORE", "yes")),
                  "TORCHELASTIC_USE_AGENT_STORE=yes: expected True or False, as torchrun sets it");
  EXPECT_FT_ERROR(read_rank_env(without(with(torchrun(1, 2), "TORCHELASTIC_USE_AGENT_STORE", "True"), "MASTER_ADDR")),
                  "TORCHELASTIC_USE_AGENT_STORE=True says torchrun's agent hosts the rendezvous store, but MASTER_ADDR "
                  "is not set");
  EXPECT_FT_ERROR(read_rank_env(without(with(torchrun(1, 2), "TORCHELASTIC_USE_AGENT_STORE", "True"), "MASTER_PORT")),
                  "but MASTER_PORT is not set: torchrun sets MASTER_ADDR and MASTER_PORT");
  EXPECT_FT_ERROR(read_rank_env(with(torchrun(1, 2), "TORCHELASTIC_RESTART_COUNT", "x")),
                  "TORCHELASTIC_RESTART_COUNT=x: expected a non-negative integer");
}

TEST(RankEnv, LocalValuesDefaultToASingleNode) {
  const RankEnv e = read_rank_env(EnvMap{{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"MASTER_PORT", "1234"}});
  EXPECT_EQ(e.local_rank, 3);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.master_addr, "127.0.0.1");
  const RankEnv one = read_rank_env(EnvMap{{"WORLD_SIZE", "1"}});
  EXPECT_EQ(one.world_size, 1);
  EXPECT_EQ(one.master_port, 0);
}

TEST(RankEnv, ErrorsNameTheVariableAndTheValue) {
  EXPECT_FT_ERROR(read_rank_env(with(torchrun(0, 2), "RANK", "abc")),
                  "RANK=abc: expected a non-negative integer (start the ranks with ft_launch or torchrun");
  EXPECT_FT_ERROR(read_rank_env(with(torchrun(0, 2), "RANK", "-1")),
                  "RANK=-1: expected a non-negative integer, got a negative one");
  EXPECT_FT_ERROR(read_rank_env(with(torchrun(0, 2), "WORLD_SIZE", "2x")), "WORLD_SIZE=2x: expected a non-negative integer");
  EXPECT_FT_ERROR(read_rank_env(with(torchrun(0, 2), "LOCAL_RANK", "")), "LOCAL_RANK is set but empty");
  EXPECT_FT_ERROR(read_rank_env(with(torchrun(0, 2), "RANK", "99999999999")), "RANK=99999999999: too large");
  EXPECT_FT_ERROR(read_rank_env(with(torchrun(0, 2), "RANK", "2")),
                  "RANK=2 is out of range for WORLD_SIZE=2: ranks are 0..1 (every rank must be started with the same "
                  "WORLD_SIZE)");
  EXPECT_FT_ERROR(read_rank_env(with(torchrun(0, 2), "WORLD_SIZE", "0")), "WORLD_SIZE=0: expected at least 1");
  EXPECT_FT_ERROR(read_rank_env(without(torchrun(1, 2), "MASTER_PORT")),
                  "WORLD_SIZE=2 but MASTER_PORT is not set: rank 0 hosts the rendezvous at MASTER_ADDR:MASTER_PORT");
  EXPECT_FT_ERROR(read_rank_env(with(torchrun(1, 2), "MASTER_PORT", "70000")),
                  "MASTER_PORT=70000: expected a TCP port in 1..65535");
  EXPECT_FT_ERROR(read_rank_env(with(torchrun(1, 2), "MASTER_PORT", "0")), "MASTER_PORT=0: expected a TCP port in 1..65535");
  EXPECT_FT_ERROR(read_rank_env(with(torchrun(1, 2), "MASTER_ADDR", "")), "MASTER_ADDR is set but empty");
  EXPECT_FT_ERROR(read_rank_env(with(torchrun(1, 2), "LOCAL_RANK", "2")),
                  "LOCAL_RANK=2 is out of range for LOCAL_WORLD_SIZE=2: local ranks are 0..1");
  EXPECT_FT_ERROR(read_rank_env(with(torchrun(1, 4), "LOCAL_WORLD_SIZE", "8")),
                  "LOCAL_WORLD_SIZE=8 is larger than WORLD_SIZE=4");
  EXPECT_FT_ERROR(read_rank_env(with(torchrun(1, 4), "LOCAL_WORLD_SIZE", "0")), "LOCAL_WORLD_SIZE=0: expected at least 1");
  EXPECT_FT_ERROR(read_rank_env(EnvMap{{"RANK", "1"}}), "RANK=1 is set but WORLD_SIZE is not");
  EXPECT_FT_ERROR(read_rank_env(EnvMap{{"WORLD_SIZE", "4"}}), "WORLD_SIZE=4 is set but RANK is not: each process needs its RANK, 0..3");
}

EnvMap slurm() {
  return {{"SLURM_PROCID", "5"},           {"SLURM_LOCALID", "1"},  {"SLURM_NTASKS", "8"},
          {"SLURM_NTASKS_PER_NODE", "4"},  {"SLURM_JOB_ID", "123456"},
          {"SLURM_JOB_NODELIST", "gpu[01-04,07]"}, {"SLURM_NODELIST", "ignored"}};
}

TEST(RankEnv, SlurmVariablesWhenRankIsAbsent) {
  const RankEnv e = read_rank_env(slurm());
  EXPECT_EQ(e.source, "slurm");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.master_addr, "gpu01");
  EXPECT_EQ(e.master_port, 15000 + 123456 % 20000);  // the same on every task of the job

  const RankEnv explicit_master = read_rank_env(with(with(slurm(), "MASTER_ADDR", "head"), "MASTER_PORT", "29400"));
  EXPECT_EQ(explicit_master.master_addr, "head");
  EXPECT_EQ(explicit_master.master_port, 29400);
  EXPECT_EQ(read_rank_env(without(slurm(), "SLURM_JOB_NODELIST")).master_addr, "ignored");
  // torchrun's variables win inside a Slurm allocation.
  EnvMap both = slurm();
  for (const auto& [k, v] : torchrun(1, 2)) both[k] = v;
  EXPECT_EQ(read_rank_env(both).source, "torchrun");
  EXPECT_EQ(read_rank_env(both).world_size, 2);
}

TEST(RankEnv, SlurmLocalWorldSizeIsDerived) {
  EnvMap e = without(slurm(), "SLURM_NTASKS_PER_NODE");
  e["SLURM_TASKS_PER_NODE"] = "2(x3),1";
  e["SLURM_NTASKS"] = "7";
  e["SLURM_PROCID"] = "6";
  e["SLURM_LOCALID"] = "0";
  e["SLURM_NODEID"] = "3";
  EXPECT_EQ(read_rank_env(e).local_world_size, 1);
  e["SLURM_NODEID"] = "1";
  EXPECT_EQ(read_rank_env(e).local_world_size, 2);
  e["SLURM_NODEID"] = "4";
  EXPECT_FT_ERROR(read_rank_env(e), "SLURM_NODEID=4 is out of range for SLURM_TASKS_PER_NODE=2(x3),1 (4 nodes)");

  EnvMap n = without(slurm(), "SLURM_NTASKS_PER_NODE");
  n["SLURM_NNODES"] = "2";
  EXPECT_EQ(read_rank_env(n).local_world_size, 4);
  n["SLURM_NNODES"] = "3";
  EXPECT_FT_ERROR(read_rank_env(n), "SLURM_NTASKS=8 does not divide over SLURM_NNODES=3");
  EXPECT_EQ(read_rank_env(without(without(slurm(), "SLURM_NTASKS_PER_NODE"), "SLURM_LOCALID")).local_world_size, 8);
}

TEST(RankEnv, SlurmErrors) {
  EXPECT_FT_ERROR(read_rank_env(with(slurm(), "SLURM_PROCID", "8")),
                  "SLURM_PROCID=8 is out of range for SLURM_NTASKS=8: ranks are 0..7");
  EXPECT_FT_ERROR(read_rank_env(with(slurm(), "SLURM_LOCALID", "4")),
                  "SLURM_LOCALID=4 is out of range for SLURM_NTASKS_PER_NODE=4");
  EXPECT_FT_ERROR(read_rank_env(with(slurm(), "SLURM_PROCID", "x")), "SLURM_PROCID=x: expected a non-negative integer");
  EXPECT_FT_ERROR(read_rank_env(without(slurm(), "SLURM_NTASKS")), "SLURM_PROCID=5 is set but SLURM_NTASKS is not");
  EXPECT_FT_ERROR(read_rank_env(without(slurm(), "SLURM_JOB_ID")),
                  "SLURM_NTASKS=8 but MASTER_PORT is not set and there is no SLURM_JOB_ID to derive one from");
  EXPECT_FT_ERROR(read_rank_env(with(slurm(), "SLURM_NTASKS_PER_NODE", "4(x")), "SLURM_NTASKS_PER_NODE=4(x");
}

TEST(RankEnv, FirstSlurmHost) {
  EXPECT_EQ(first_slurm_host("node[01-04,07]"), "node01");
  EXPECT_EQ(first_slurm_host("node[07,01-04]"), "node07");
  EXPECT_EQ(first_slurm_host("node5"), "node5");
  EXPECT_EQ(first_slurm_host("a,b[1-2]"), "a");
  EXPECT_EQ(first_slurm_host("gpu-[3-5],cpu1"), "gpu-3");
  EXPECT_EQ(first_slurm_host("rack[1-2]-n[07,09]"), "rack1-n07");
  EXPECT_FT_ERROR(first_slurm_host("node[01-04"), "Slurm node list node[01-04: unbalanced '['");
  EXPECT_FT_ERROR(first_slurm_host(""), "Slurm node list \"\": expected host names like node[01-04,07]");
}

TEST(RankEnv, RendezvousTimeout) {
  EXPECT_EQ(rendezvous_timeout_s(300, EnvMap{}), 300);
  EXPECT_EQ(rendezvous_timeout_s(300, EnvMap{{"FT_RENDEZVOUS_TIMEOUT", "2.5"}}), 2.5);
  EXPECT_FT_ERROR(rendezvous_timeout_s(300, EnvMap{{"FT_RENDEZVOUS_TIMEOUT", "abc"}}),
                  "FT_RENDEZVOUS_TIMEOUT=abc: expected a number of seconds > 0");
  EXPECT_FT_ERROR(rendezvous_timeout_s(300, EnvMap{{"FT_RENDEZVOUS_TIMEOUT", "0"}}),
                  "FT_RENDEZVOUS_TIMEOUT=0: expected a number of seconds > 0");
}

TEST(RankEnv, ProcessEnvironmentIsRead) {
  ::setenv("FT_RANK_ENV_TEST_VAR", "x=y", 1);
  EXPECT_EQ(process_environment().at("FT_RANK_ENV_TEST_VAR"), "x=y");
  ::unsetenv("FT_RANK_ENV_TEST_VAR");
}

}  // namespace
}  // namespace ft::comm
