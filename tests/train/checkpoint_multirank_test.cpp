// Checkpoints with real processes (ft_launch, Gloo, fp32 on the CPU) on the tiny model and a
// small training set whose epochs are 4 steps long on any number of ranks, 12 steps in all,
// a checkpoint every 3:
//   - exact: a run killed between saves (SIGKILL of one rank) or stopped by SIGTERM (ft_launch
//     passes it on) and resumed gives bit for bit the losses, evaluation and weights of an
//     uninterrupted run, for LoRA+ddp (with dropout, so the RNG state matters), zero2 and fsdp,
//     and with fp32 masters apart from the parameters (bf16 ddp and fsdp, zero2 with offload);
//     the resumed part crosses epoch boundaries;
//   - crash-safe: rank 0 killed at every stage of a save leaves a complete `latest` checkpoint,
//     a restart cleans up and still reproduces the uninterrupted run;
//   - resharding: saved on 2 ranks, resumed on 4 and on 1; saved on 4, resumed on 2; for ddp,
//     zero1, zero2 and fsdp, and across strategies: the loss curve continues (1e-5 relative);
//   - in the background (checkpoint.async): every file of every checkpoint equals a synchronous
//     save's, the run is bit for bit the same, and the kills at every stage and the full disk
//     below end the same way;
//   - refusals: a damaged or truncated file is an error naming it, an earlier checkpoint still
//     resumes; a config that changes the math is refused unless --resume-force; a full disk
//     (a file-size limit) fails the save and leaves the previous checkpoint as it was.
#include <gtest/gtest.h>

#include "training_runs.h"

namespace ft {
namespace {

using namespace ft::test;

const char* const kAsync = "--set checkpoint.async=true";

class ExactResume : public ::testing::TestWithParam<TrainSetup> {};

TEST_P(ExactResume, KilledBetweenSavesThenResumedIsBitwiseTheSame) {
  const auto& [ref_dir, ref] = reference(GetParam(), 2);
  ASSERT_EQ(ref.exit_code, 0);
  // keep_last 2: only the last two checkpoints remain, `latest` names the final one.
  EXPECT_EQ(checkpoint::complete_checkpoints(ref_dir->run_dir()),
            (std::vector<std::string>{ref_dir->checkpoint(9), ref_dir->checkpoint(12)}));
  EXPECT_EQ(latest_step(ref_dir->run_dir()), 12);

  RunDir dir(GetParam(), 2);
  const RunResult killed = dir.run(2, "", "FT_FAULT=step.done:5@1");  // rank 1 SIGKILLed after step 5
  EXPECT_NE(killed.exit_code, 0);
  EXPECT_EQ(latest_step(dir.run_dir()), 3);
  EXPECT_TRUE(killed.weights.empty());
  const RunResult resumed = dir.run(2);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("step_000003 at step 3 of 12"), std::string::npos) << resumed.output;
  if (GetParam().skip_spikes) {
    // The guard skipped steps after the checkpoint, so its restored history decided them.
    std::int64_t at_checkpoint = -1, at_end = -1;
    for (const Json& m : test::read_metrics(dir.run_dir())) {
      if (!m.contains("spike_steps")) continue;
      if (m["step"] == 3) at_checkpoint = m["spike_steps"];
      at_end = m["spike_steps"];
    }
    EXPECT_GT(at_end, at_checkpoint);
    EXPECT_GE(at_checkpoint, 0);
  }
  expect_identical(ref, resumed);
}

TEST_P(ExactResume, StoppedBySigtermThenResumedIsBitwiseTheSame) {
  const auto& [ref_dir, ref] = reference(GetParam(), 2);
  RunDir dir(GetParam(), 2);
  // After step 7 rank 0 sends SIGTERM to ft_launch, which passes it to both ranks: they finish
  // the step they are in, save, and exit 0 (and so does ft_launch), writing no results.
  const RunResult stopped = dir.run(2, "", "FT_FAULT=step.done:7@0 FT_FAULT_ACTION=sigterm-parent");
  ASSERT_EQ(stopped.exit_code, 0) << stopped.output;
  EXPECT_NE(stopped.output.find("stopped by a signal"), std::string::npos) << stopped.output;
  EXPECT_TRUE(stopped.weights.empty());
  const std::int64_t at = latest_step(dir.run_dir());
  EXPECT_GE(at, 8);
  EXPECT_LT(at, kSteps);
  expect_latest_complete(dir.run_dir());
  const RunResult resumed = dir.run(2);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  expect_identical(ref, resumed);
}

INSTANTIATE_TEST_SUITE_P(Strategies, ExactResume,
                         // bf16 and offload: fp32 master weights apart from the parameters.
                         ::testing::Values(TrainSetup{"ddp", true, 0.1}, TrainSetup{"zero2", false}, TrainSetup{"fsdp", false},
                                           TrainSetup{"ddp", false, 0.0, "bf16"}, TrainSetup{"fsdp", false, 0.0, "bf16"},
                                           TrainSetup{"zero2", false, 0.0, "fp32", true},
                                           TrainSetup{"zero2", false, 0.0, "fp32", false, true}),
                         [](const auto& info) { return label(info.param); });

// Rank 0 killed at each stage of the second save (step 6): the checkpoint `latest` names is
// complete, the restart removes the unfinished folder and reproduces the uninterrupted run.
// `args`: "--set checkpoint.async=true" kills the background writer at the same stages.
void killed_at_every_stage_of_a_save(const std::string& args) {
  const TrainSetup setup{"zero2", false};
  const auto& [ref_dir, ref] = reference(setup);
  const std::vector<std::pair<std::string, int>> stages = {
      {"checkpoint.started", 3},        {"checkpoint.rank_files_written", 3}, {"checkpoint.files_written", 3},
      {"checkpoint.manifest_written", 3}, {"checkpoint.renamed", 3},          {"checkpoint.latest_written", 6}};
  for (const auto& [stage, expected_latest] : stages) {
    SCOPED_TRACE(stage);
    RunDir dir(setup, 100);
    const RunResult killed = dir.run(2, args, "FT_FAULT=" + stage + ":2@0");
    EXPECT_NE(killed.exit_code, 0);
    EXPECT_EQ(latest_step(dir.run_dir()), expected_latest);
    checkpoint::CheckpointReader latest(*checkpoint::latest_checkpoint(dir.run_dir()));
    for (const auto& f : latest.manifest().files) EXPECT_NO_THROW(checkpoint::verify_file(latest.dir(), latest.manifest(), f.path));
    const RunResult resumed = dir.run(2, args);
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    expect_latest_complete(dir.run_dir());
    expect_identical(ref, resumed);
  }
}

TEST(CheckpointCrash, KilledAtEveryStageOfASave) { killed_at_every_stage_of_a_save(""); }

// checkpoint.async: the writer threads' stages, with training going on meanwhile.
TEST(CheckpointCrash, KilledAtEveryStageOfABackgroundSave) { killed_at_every_stage_of_a_save(kAsync); }

// Every file of every checkpoint saved in the background is the file a synchronous save writes,
// byte for byte (LoRA with dropout: the RNG state; zero2 and fsdp full: sharded state and the
// gathered model), and so are the run's losses, evaluation and weights.
class AsyncSave : public ::testing::TestWithParam<TrainSetup> {};

TEST_P(AsyncSave, WritesTheSameFilesAsASynchronousSave) {
  const auto& [ref_dir, ref] = reference(GetParam());
  RunDir dir(GetParam(), 100);
  const RunResult async = dir.run(2, kAsync);
  ASSERT_EQ(async.exit_code, 0) << async.output;
  EXPECT_NE(async.output.find("written in the background"), std::string::npos) << async.output;
  expect_identical(ref, async);
  expect_latest_complete(dir.run_dir());
  for (int step = kEvery; step <= kSteps; step += kEvery) {
    SCOPED_TRACE(step);
    const checkpoint::CheckpointReader sync_checkpoint(ref_dir->checkpoint(step));
    const checkpoint::CheckpointReader async_checkpoint(dir.checkpoint(step));
    ASSERT_EQ(sync_checkpoint.manifest().files.size(), async_checkpoint.manifest().files.size());
    for (const auto& f : sync_checkpoint.manifest().files) {
      if (f.path == "config.json") continue;  // the run's config: another run_dir, checkpoint.async
      const auto* same = async_checkpoint.manifest().find(f.path);
      ASSERT_NE(same, nullptr) << f.path;
      EXPECT_EQ(same->size, f.size) << f.path;
      EXPECT_TRUE(read_file(sync_checkpoint.dir() + "/" + f.path) == read_file(async_checkpoint.dir() + "/" + f.path))
          << f.path << " differs";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Strategies, AsyncSave,
                         ::testing::Values(TrainSetup{"ddp", true, 0.1}, TrainSetup{"zero2", false},
                                           TrainSetup{"fsdp", false}),
                         [](const auto& info) { return label(info.param); });

class Reshard : public ::testing::TestWithParam<TrainSetup> {};

TEST_P(Reshard, SavedOnTwoRanksResumesOnFourAndOne) {
  const auto& [ref_dir, ref] = reference(GetParam());
  ASSERT_EQ(ref.exit_code, 0);
  for (int ranks : {4, 1}) {
    SCOPED_TRACE(ranks);
    RunDir dir(GetParam(), 100);
    const RunResult resumed = dir.run(ranks, "--resume " + ref_dir->checkpoint(6));
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    expect_continues(ref, resumed, 6);
  }
}

TEST_P(Reshard, SavedOnFourRanksResumesOnTwo) {
  const auto& [ref_dir, ref] = reference(GetParam());
  RunDir dir(GetParam(), 100);
  const RunResult killed = dir.run(4, "", "FT_FAULT=step.done:7@2");
  EXPECT_NE(killed.exit_code, 0);
  ASSERT_EQ(latest_step(dir.run_dir()), 6);
  const RunResult resumed = dir.run(2);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  ASSERT_GE(resumed.losses.size(), 6u);
  // metrics.jsonl holds the 4-rank steps 1-6 and the 2-rank steps 7-12.
  RunResult tail = resumed;
  tail.losses.erase(tail.losses.begin(), tail.losses.begin() + 6);
  expect_continues(ref, tail, 6);
}

INSTANTIATE_TEST_SUITE_P(Strategies, Reshard,
                         ::testing::Values(TrainSetup{"ddp", true}, TrainSetup{"zero1", false}, TrainSetup{"zero2", false},
                                           TrainSetup{"fsdp", false}),
                         [](const auto& info) { return label(info.param); });

TEST(Reshard, ZeroTwoCheckpointResumesUnderFsdp) {
  const auto& [ref_dir, ref] = reference(TrainSetup{"zero2", false});
  RunDir dir(TrainSetup{"fsdp", false}, 100);
  const RunResult resumed = dir.run(2, "--resume " + ref_dir->checkpoint(6));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  expect_continues(ref, resumed, 6);
}

// A copy of the reference run folder to damage.
void copy_run(const std::string& from, const std::string& to) {
  ASSERT_EQ(test::run_command("cp -r " + from + " " + to).exit_code, 0);
}

TEST(CheckpointErrors, DamagedFilesAreNamedAndAnEarlierCheckpointStillResumes) {
  const TrainSetup setup{"zero2", false};
  const auto& [ref_dir, ref] = reference(setup);
  RunDir dir(setup, 100);
  copy_run(ref_dir->run_dir(), dir.run_dir());
  const std::string step9 = dir.checkpoint(9);
  {
    // One flipped byte in rank 1's shard: rank 1 names the file, rank 0 says another rank failed.
    const std::string file = step9 + "/rank_00001.safetensors";
    std::string bytes = read_file(file);
    bytes[bytes.size() - 5] ^= 0x40;
    write_file_atomic(file, bytes);
    const RunResult r = dir.run(2, "--resume " + step9);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("rank_00001.safetensors: checksum mismatch"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("another rank could not read"), std::string::npos) << r.output;
  }
  {
    const std::string file = step9 + "/rank_00000.safetensors";
    const std::string bytes = read_file(file);
    write_file_atomic(file, bytes.substr(0, bytes.size() / 2));
    const RunResult r = dir.run(2, "--resume " + step9);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("rank_00000.safetensors: " + std::to_string(bytes.size() / 2) + " bytes, the manifest says"),
              std::string::npos)
        << r.output;
  }
  {
    write_file_atomic(step9 + "/training_state.json", "{\"step\": 9,");
    const RunResult r = dir.run(1, "--resume " + step9);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("training_state.json"), std::string::npos) << r.output;
  }
  {
    write_file_atomic(step9 + "/manifest.json", "not json");
    const RunResult r = dir.run(1, "--resume " + step9);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("manifest.json"), std::string::npos) << r.output;
  }
  // `latest` naming a damaged checkpoint: the error lists the complete ones to pass to --resume.
  checkpoint::point_latest_at(dir.run_dir(), "step_000011");
  const RunResult missing = dir.run(2);
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("pass one with --resume"), std::string::npos) << missing.output;
  const RunResult earlier = dir.run(2, "--resume " + dir.checkpoint(6));
  ASSERT_EQ(earlier.exit_code, 0) << earlier.output;
  EXPECT_EQ(earlier.losses, ref.losses);
  EXPECT_EQ(earlier.eval_loss, ref.eval_loss);
}

TEST(CheckpointErrors, AConfigThatChangesTheMathIsRefusedUnlessForced) {
  const TrainSetup setup{"ddp", true};
  const auto& [ref_dir, ref] = reference(setup);
  RunDir dir(setup, 100);
  const std::string from = "--resume " + ref_dir->checkpoint(6);
  const RunResult refused = dir.run(1, from + " --set train.lr=0.02 --set lora.r=8");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.output.find("train.lr: 0.01 -> 0.02"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("lora.r: 4 -> 8"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("--resume-force"), std::string::npos) << refused.output;
  const RunResult forced = dir.run(1, from + " --set train.lr=0.02 --resume-force");
  EXPECT_EQ(forced.exit_code, 0) << forced.output;
  // How the work is spread does not change the math: accepted without a word.
  RunDir other(setup, 100);
  const RunResult spread = other.run(1, from + " --set train.micro_batch_size=4 --set parallel.bucket_mb=1");
  ASSERT_EQ(spread.exit_code, 0) << spread.output;
  expect_continues(ref, spread, 6);
}

// ft_launch --max-restarts: rank 1 is killed by the 5th step of every start (after steps 5, 8
// and 11), each restart continues from the latest checkpoint (3, 6, 9), and the fourth start
// finishes the run: the same losses and weights as never failing. One restart is not enough.
TEST(Restarts, AFailedRankRestartsEveryRankFromTheLatestCheckpoint) {
  const TrainSetup setup{"zero2", false};
  const auto& [ref_dir, ref] = reference(setup);
  RunDir dir(setup, 2);
  auto launch = [&](int restarts) {
    return test::run_command("FT_FAULT=step.done:5@1 " + test::bin_path("ft_launch") + " --nproc_per_node 2 --max-restarts " +
                                 std::to_string(restarts) + " " + test::bin_path("ft_train") + " " + dir.config_path(),
                             true);
  };
  const auto gave_up = launch(1);
  EXPECT_EQ(gave_up.exit_code, 128 + 9) << gave_up.output;
  EXPECT_NE(gave_up.output.find("restarting all ranks (restart 1 of 1)"), std::string::npos) << gave_up.output;
  EXPECT_NE(gave_up.output.find("giving up after 1 restarts"), std::string::npos) << gave_up.output;
  EXPECT_EQ(latest_step(dir.run_dir()), 6);

  RunDir fresh(setup, 2);
  const auto done = test::run_command("FT_FAULT=step.done:5@1 " + test::bin_path("ft_launch") +
                                          " --nproc_per_node 2 --max-restarts 3 " + test::bin_path("ft_train") + " " +
                                          fresh.config_path(),
                                      true);
  ASSERT_EQ(done.exit_code, 0) << done.output;
  EXPECT_NE(done.output.find("restart 3 of 3"), std::string::npos) << done.output;
  EXPECT_NE(done.output.find("step_000009 at step 9 of 12"), std::string::npos) << done.output;
  expect_identical(ref, fresh.collect());
}

void a_full_disk_fails_the_save_and_keeps_the_previous_checkpoint(const std::string& args) {
  const TrainSetup setup{"ddp", false};
  RunDir dir(setup, 100);
  // A synchronous save of step 3 (one in the background might still be completing at the kill).
  const RunResult killed = dir.run(1, "", "FT_FAULT=step.done:4");
  EXPECT_NE(killed.exit_code, 0);
  ASSERT_EQ(latest_step(dir.run_dir()), 3);
  // Files may not grow past 200 KiB: the metrics still fit, the next checkpoint's shard does not.
  const RunResult full = dir.run(1, args, "ulimit -f 200;");
  EXPECT_EQ(full.exit_code, 1) << full.output;
  EXPECT_NE(full.output.find("rank_00000.safetensors"), std::string::npos) << full.output;
  EXPECT_NE(full.output.find("File too large"), std::string::npos) << full.output;
  EXPECT_NE(full.output.find("the previous checkpoint is untouched"), std::string::npos) << full.output;
  EXPECT_EQ(latest_step(dir.run_dir()), 3);
  expect_latest_complete(dir.run_dir());
  EXPECT_FALSE(file_exists(dir.checkpoint(6)));
  const RunResult resumed = dir.run(1, args);
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(latest_step(dir.run_dir()), kSteps);
}

TEST(CheckpointErrors, AFullDiskFailsTheSaveAndKeepsThePreviousCheckpoint) {
  a_full_disk_fails_the_save_and_keeps_the_previous_checkpoint("");
}

// In the background: the writer's error reaches every rank at the next step, and the run stops.
TEST(CheckpointErrors, AFullDiskFailsABackgroundSaveAndKeepsThePreviousCheckpoint) {
  a_full_disk_fails_the_save_and_keeps_the_previous_checkpoint(kAsync);
}

}  // namespace
}  // namespace ft
