// Fault injection on real multi-rank training (ft_launch, 2 ranks, the tiny model; ctest label
// `faults`, with the checkpoint suite's kills, full disk and damaged files). For each fault: every
// process ends (ft_launch reaps them all; the test's `timeout` is only a safety net), the exit
// code and the message name the cause, the last complete checkpoint is intact, and resuming from
// it reproduces the uninterrupted run bit for bit.
//   - a NaN in one rank's loss (so its gradients): stops every rank naming the step, or with
//     train.on_nonfinite "skip" is skipped on every rank;
//   - a rank that stops responding (SIGSTOP) inside training: the other names it within
//     parallel.timeout_s;
//   - a corrupt record in the data: an error naming file and line, or skipped and counted;
//   - the rendezvous port already taken: an error naming it.
#include <gtest/gtest.h>

#include <unistd.h>

#include "training_runs.h"

namespace ft {
namespace {

using namespace ft::test;

// `timeout` bounds the whole command: a hang fails the test instead of the suite.
RunResult run_bounded(const RunDir& dir, int ranks, const std::string& args, const std::string& env) {
  return dir.run(ranks, args, "timeout 120 env " + env);
}

TEST(Faults, NanInOneRanksLossStopsEveryRankAndTheRunResumes) {
  const TrainSetup setup{"zero2", false};
  const auto& [ref_dir, ref] = reference(setup);
  RunDir dir(setup, 100);
  // The 9th micro-batch of rank 1 = step 5 (2 micro-batches per step).
  const RunResult stopped = run_bounded(dir, 2, "", "FT_FAULT=loss.nan:9@1 FT_FAULT_ACTION=nan");
  EXPECT_EQ(stopped.exit_code, 1) << stopped.output;
  EXPECT_NE(stopped.output.find("step 5: the loss is nan; stopping before it reaches the weights"), std::string::npos)
      << stopped.output;
  EXPECT_EQ(latest_step(dir.run_dir()), 3);
  expect_latest_complete(dir.run_dir());
  const RunResult resumed = dir.run(2);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  expect_identical(ref, resumed);
}

TEST(Faults, NanInOneRanksLossIsSkippedOnEveryRankWhenAsked) {
  RunDir dir(TrainSetup{"zero2", false}, 100);
  const RunResult r = run_bounded(dir, 2, "--set train.on_nonfinite=skip", "FT_FAULT=loss.nan:9@1 FT_FAULT_ACTION=nan");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::int64_t> skipped;
  for (const Json& m : read_metrics(dir.run_dir()))
    if (m.value("skipped", false)) skipped.push_back(m["step"].get<std::int64_t>());
  EXPECT_EQ(skipped, std::vector<std::int64_t>{5});
  EXPECT_EQ(r.losses.size(), static_cast<std::size_t>(kSteps));
}

TEST(Faults, AStoppedRankIsNamedWithinTheTimeoutAndTheRunResumes) {
  const TrainSetup setup{"fsdp", false};
  const auto& [ref_dir, ref] = reference(setup);
  RunDir dir(setup, 100);
  // Rank 1 stops (SIGSTOP) after step 4; rank 0 waits in its next collective until
  // parallel.timeout_s, then names rank 1; ft_launch stops and reaps both.
  const RunResult hung = run_bounded(dir, 2, "--set parallel.timeout_s=5",
                                     "FT_FAULT=step.done:4@1 FT_FAULT_ACTION=sigstop");
  EXPECT_NE(hung.exit_code, 0) << hung.output;
  EXPECT_NE(hung.exit_code, 124) << "hung until the safety timeout:\n" << hung.output;
  EXPECT_NE(hung.output.find("is stopped (SIGSTOP"), std::string::npos) << hung.output;
  EXPECT_EQ(test::run_command("pgrep -f '^" + test::bin_path("ft_train") + " " + dir.config_path() + "'").output, "");
  EXPECT_EQ(latest_step(dir.run_dir()), 3);
  const RunResult resumed = dir.run(2);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  expect_identical(ref, resumed);
}

TEST(Faults, ACorruptRecordIsAnErrorNamingItsLineOrSkipped) {
  TempDir data;
  std::string lines = read_file(small_dataset());
  std::size_t pos = 0;
  for (int line = 1; line < 20; ++line) pos = lines.find('\n', pos) + 1;
  lines.insert(pos, "{\"instruction\": \"a record cut short by a crash\", \"output\n");  // line 20
  write_file_atomic(data.file("broken.jsonl"), lines);
  RunDir dir(TrainSetup{"ddp", true}, 100);
  const std::string use = "--set data.train=" + data.file("broken.jsonl");
  const RunResult strict = run_bounded(dir, 2, use, "");
  EXPECT_EQ(strict.exit_code, 1) << strict.output;
  EXPECT_NE(strict.output.find("broken.jsonl:20"), std::string::npos) << strict.output;
  const RunResult lenient = run_bounded(dir, 2, use + " --set data.on_bad_record=skip", "");
  EXPECT_EQ(lenient.exit_code, 0) << lenient.output;
  EXPECT_NE(lenient.output.find("1 bad records skipped"), std::string::npos) << lenient.output;
}

TEST(Faults, ARendezvousPortInUseIsNamed) {
  int fd = -1;
  const int port = test::free_port(&fd);  // listening: in use
  RunDir dir(TrainSetup{"ddp", true}, 100);
  const auto r = test::run_command("timeout 120 " + test::bin_path("ft_launch") + " --nproc_per_node 2 --master_port " +
                                       std::to_string(port) + " " + test::bin_path("ft_train") + " " + dir.config_path() +
                                       " --set parallel.timeout_s=10",
                                   true);
  ::close(fd);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << r.output;
  EXPECT_NE(r.output.find(std::to_string(port)), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ft
