// ft_launch's command line and the environment it gives each rank, without starting a process.
#include "launch/launch_options.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

#include "launch/rank_environment.h"

namespace ft::launch {
namespace {

Options parse(std::initializer_list<const char*> args) {
  std::vector<const char*> argv = {"ft_launch"};
  argv.insert(argv.end(), args);
  return parse_options(static_cast<int>(argv.size()), argv.data());
}

// The UsageError message of parsing `args`, "" when it parses.
std::string error_of(std::initializer_list<const char*> args) {
  try {
    parse(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(LaunchOptions, Defaults) {
  const Options o = parse({"ft_train", "cfg.json", "--set", "train.lr=1"});
  EXPECT_FALSE(o.help);
  EXPECT_EQ(o.nproc_per_node, 1);
  EXPECT_EQ(o.nnodes, 1);
  EXPECT_EQ(o.node_rank, 0);
  EXPECT_EQ(o.master_addr, "127.0.0.1");
  EXPECT_EQ(o.master_port, 0);
  EXPECT_EQ(o.grace_s, 10);
  EXPECT_EQ(o.stop_grace_s, 600);
  EXPECT_EQ(o.max_restarts, 0);
  // Flags after PROGRAM are PROGRAM's.
  EXPECT_EQ(o.command, (std::vector<std::string>{"ft_train", "cfg.json", "--set", "train.lr=1"}));
}

TEST(LaunchOptions, BothSpellingsAndBothValueForms) {
  const Options o = parse({"--nproc-per-node=3", "--master_port", "29999", "--grace-period", "1.5",
                           "--stop_grace_period=0", "--max-restarts", "2", "--master-addr", "node01", "sh"});
  EXPECT_EQ(o.nproc_per_node, 3);
  EXPECT_EQ(o.master_port, 29999);
  EXPECT_EQ(o.grace_s, 1.5);
  EXPECT_EQ(o.stop_grace_s, 0);
  EXPECT_EQ(o.max_restarts, 2);
  EXPECT_EQ(o.master_addr, "node01");
  const Options nodes = parse({"--nnodes", "2", "--node_rank", "1", "--master_addr", "n0", "--master_port", "1", "sh"});
  EXPECT_EQ(nodes.nnodes, 2);
  EXPECT_EQ(nodes.node_rank, 1);
  EXPECT_EQ(nodes.join_timeout_s, 600);  // torchrun's join_timeout
  const Options rejoin = parse({"--nnodes", "2", "--master_addr", "n0", "--master_port", "1", "--max-restarts", "3",
                                "--join-timeout", "90", "sh"});
  EXPECT_EQ(rejoin.max_restarts, 3);
  EXPECT_EQ(rejoin.join_timeout_s, 90);
}

TEST(LaunchOptions, DoubleDashEndsTheFlags) {
  EXPECT_EQ(parse({"--nproc_per_node", "2", "--", "--odd-program", "-x"}).command,
            (std::vector<std::string>{"--odd-program", "-x"}));
}

TEST(LaunchOptions, Help) {
  EXPECT_TRUE(parse({"-h"}).help);
  EXPECT_TRUE(parse({"--nproc_per_node", "2", "--help"}).help);
  EXPECT_NE(std::string(kUsage).find("usage: ft_launch"), std::string::npos);
}

TEST(LaunchOptions, UsageErrors) {
  EXPECT_EQ(error_of({}), "no PROGRAM to launch");
  EXPECT_EQ(error_of({"--bogus", "1", "true"}), "unknown option --bogus");
  EXPECT_EQ(error_of({"--nproc_per_node", "0", "true"}), "--nproc_per_node: expected an integer in 1..4096, got \"0\"");
  EXPECT_EQ(error_of({"--nproc-per-node=2x", "true"}), "--nproc_per_node: expected an integer in 1..4096, got \"2x\"");
  EXPECT_EQ(error_of({"--master_port", "65536", "true"}), "--master_port: expected an integer in 1..65535, got \"65536\"");
  EXPECT_EQ(error_of({"--grace-period", "-1", "true"}), "--grace_period: expected seconds >= 0, got \"-1\"");
  EXPECT_EQ(error_of({"--stop-grace-period", "", "true"}), "--stop_grace_period: expected seconds >= 0, got \"\"");
  EXPECT_EQ(error_of({"--nproc-per-node"}), "--nproc-per-node needs a value");
  EXPECT_EQ(error_of({"--nnodes", "2", "--node_rank", "2", "true"}), "--node_rank 2 is out of range for --nnodes 2");
  EXPECT_EQ(error_of({"--nnodes", "2", "--node_rank", "1", "true"}),
            "--nnodes > 1 needs --master_addr (node rank 0's host) and --master_port, the same on every node");
  EXPECT_EQ(error_of({"--join-timeout", "soon", "true"}), "--join_timeout: expected seconds >= 0, got \"soon\"");
}

TEST(RankEnvironment, TorchrunsVariablesOverTheInheritedOnes) {
  const Options o = parse({"--nnodes", "2", "--node_rank", "1", "--nproc_per_node", "2", "--master_addr", "node01",
                           "--master_port", "29500", "sh"});
  const char* const inherited[] = {"PATH=/bin", "RANK=99", "OMP_NUM_THREADS=3", "ODD", nullptr};
  EXPECT_EQ(rank_environment(inherited, o, 1, 29500, 2),
            (std::vector<std::string>{"FT_RESTART_COUNT=2", "GROUP_RANK=1", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2",
                                      "MASTER_ADDR=node01", "MASTER_PORT=29500", "OMP_NUM_THREADS=3", "PATH=/bin",
                                      "RANK=3", "TORCHELASTIC_RESTART_COUNT=2", "WORLD_SIZE=4"}));
}

TEST(RankEnvironment, OneThreadPerRankUnlessSet) {
  const Options o = parse({"sh"});
  const char* const inherited[] = {nullptr};
  const std::vector<std::string> env = rank_environment(inherited, o, 0, 1234, 0);
  EXPECT_NE(std::find(env.begin(), env.end(), "OMP_NUM_THREADS=1"), env.end());
  EXPECT_NE(std::find(env.begin(), env.end(), "MASTER_ADDR=127.0.0.1"), env.end());
  EXPECT_NE(std::find(env.begin(), env.end(), "RANK=0"), env.end());
}

}  // namespace
}  // namespace ft::launch
