// lib/checkpoint in one process: the folder rules (latest, unfinished saves, keep_last), the
// manifest's validation and file checks, which config changes count as changing the math,
// training_state.json, and that shard pieces describe every element exactly once on any world
// size (what resharding relies on).
#include <gtest/gtest.h>

#include <cmath>

#include "checkpoint/checkpoint_folder.h"
#include "checkpoint/manifest.h"
#include "checkpoint/resume.h"
#include "checkpoint/training_state.h"
#include "parallel/shard_layout.h"
#include "test_support.h"
#include "util/file_util.h"
#include "util/hash.h"

namespace ft {
namespace {

using namespace ft::checkpoint;

void make_complete(const std::string& run_dir, std::int64_t step) {
  const std::string dir = checkpoints_dir(run_dir) + "/" + step_name(step);
  make_directories(dir);
  write_file_atomic(dir + "/" + kManifestFile, "{}");
}

TEST(CheckpointFolder, NamesAndSteps) {
  EXPECT_EQ(step_name(500), "step_000500");
  EXPECT_EQ(step_name(12345678), "step_12345678");
  EXPECT_EQ(step_of("step_000500"), 500);
  EXPECT_FALSE(step_of("step_").has_value());
  EXPECT_FALSE(step_of("step_12a").has_value());
  EXPECT_FALSE(step_of("latest").has_value());
}

TEST(CheckpointFolder, LatestIsTheNamedCompleteCheckpoint) {
  test::TempDir run;
  EXPECT_FALSE(latest_checkpoint(run.path()).has_value());
  make_complete(run.path(), 3);
  make_complete(run.path(), 6);
  // No `latest` yet (a crash between the rename and the pointer): the newest complete one.
  EXPECT_EQ(*latest_checkpoint(run.path()), checkpoints_dir(run.path()) + "/step_000006");
  point_latest_at(run.path(), "step_000003");
  EXPECT_EQ(*latest_checkpoint(run.path()), checkpoints_dir(run.path()) + "/step_000003");
  point_latest_at(run.path(), "step_000009");
  EXPECT_FT_ERROR(latest_checkpoint(run.path()), "names step_000009, which is missing");
  EXPECT_FT_ERROR(latest_checkpoint(run.path()), "step_000006");  // listed for --resume
  write_file_atomic(checkpoints_dir(run.path()) + "/latest", "../../etc\n");
  EXPECT_FT_ERROR(latest_checkpoint(run.path()), "expected a checkpoint folder name");
}

TEST(CheckpointFolder, UnfinishedSavesAreRemovedAndOldOnesPruned) {
  test::TempDir run;
  for (std::int64_t s : {3, 6, 9, 12}) make_complete(run.path(), s);
  make_directories(checkpoints_dir(run.path()) + "/step_000015.tmp/model");
  make_directories(checkpoints_dir(run.path()) + "/step_000018");  // no manifest: incomplete
  EXPECT_EQ(remove_unfinished(run.path()).size(), 1u);
  EXPECT_FALSE(file_exists(checkpoints_dir(run.path()) + "/step_000015.tmp"));
  EXPECT_EQ(complete_checkpoints(run.path()).size(), 4u);
  // keep_last 2 keeps the newest two, and never the one being kept explicitly.
  const std::string keep = checkpoints_dir(run.path()) + "/step_000003";
  EXPECT_EQ(prune_checkpoints(run.path(), 2, keep).size(), 2u);
  EXPECT_EQ(complete_checkpoints(run.path()),
            (std::vector<std::string>{keep, checkpoints_dir(run.path()) + "/step_000012"}));
}

TEST(Manifest, RoundTripsAndRefusesWhatDoesNotFit) {
  Manifest m;
  m.step = 6;
  m.world_size = 2;
  m.strategy = "zero2";
  m.config_hash = "abc";
  m.files = {{"rank_00000.safetensors", 10, "00000000"}, {"rank_00001.safetensors", 10, "00000000"}};
  m.ranks = {{0, "rank_00000.safetensors", 5, {{"w", 0, 5, 0}}}, {1, "rank_00001.safetensors", 5, {{"w", 5, 3, 0}}}};
  const Manifest back = Manifest::from_json(m.to_json(), "m");
  EXPECT_EQ(back.to_json(), m.to_json());

  Json bad = m.to_json();
  bad.erase("step");
  EXPECT_FT_ERROR(Manifest::from_json(bad, "x/manifest.json"), "x/manifest.json: \"step\" is missing");
  bad = m.to_json();
  bad["files"][0]["path"] = "../../outside";
  EXPECT_FT_ERROR(Manifest::from_json(bad, "m"), "must stay inside the checkpoint folder");
  bad = m.to_json();
  bad["ranks"][1]["pieces"][0] = Json::array({"w", 5, 9, 0});
  EXPECT_FT_ERROR(Manifest::from_json(bad, "m"), "lies outside the shard");
  bad = m.to_json();
  bad["world_size"] = 3;
  EXPECT_FT_ERROR(Manifest::from_json(bad, "m"), "\"ranks\" has 2 entries for world_size 3");
  bad = m.to_json();
  bad["format_version"] = 7;
  EXPECT_FT_ERROR(Manifest::from_json(bad, "m"), "format_version 7");
}

TEST(Manifest, VerifyFileCatchesTruncationAndDamage) {
  EXPECT_EQ(crc32("123456789", 9), 0xcbf43926u);  // the CRC-32 check value (= Python's zlib.crc32)
  test::TempDir dir;
  write_file_atomic(dir.file("a.bin"), std::string(1000, 'x'));
  Manifest m;
  m.files = {describe_file(dir.path(), "a.bin")};
  EXPECT_EQ(m.files[0].size, 1000u);
  EXPECT_NO_THROW(verify_file(dir.path(), m, "a.bin"));
  std::string damaged(1000, 'x');
  damaged[500] = 'y';
  write_file_atomic(dir.file("a.bin"), damaged);
  EXPECT_FT_ERROR(verify_file(dir.path(), m, "a.bin"), "a.bin: checksum mismatch");
  write_file_atomic(dir.file("a.bin"), std::string(999, 'x'));
  EXPECT_FT_ERROR(verify_file(dir.path(), m, "a.bin"), "a.bin: 999 bytes, the manifest says 1000");
  EXPECT_FT_ERROR(verify_file(dir.path(), m, "b.bin"), "not listed");
}

TEST(Resume, OnlyChangesThatChangeTheMathCount) {
  const Json saved = {{"run_dir", "a"},
                      {"train", {{"lr", 0.001}, {"micro_batch_size", 2}, {"threads", 1}, {"global_batch_size", 8}}},
                      {"parallel", {{"strategy", "zero2"}}},
                      {"data", {{"train", "t.json"}, {"eval", "e.json"}}},
                      {"log", {{"every_steps", 1}}}};
  Json current = saved;
  current["run_dir"] = "b";
  current["train"]["micro_batch_size"] = 4;
  current["train"]["threads"] = 2;
  current["parallel"]["strategy"] = "fsdp";
  current["data"]["eval"] = "other.json";
  current["log"]["every_steps"] = 5;
  EXPECT_TRUE(math_differences(saved, current).empty());
  current["train"]["lr"] = 0.002;
  current["train"]["global_batch_size"] = 16;
  current["data"]["train"] = "u.json";
  EXPECT_EQ(math_differences(saved, current),
            (std::vector<std::string>{"data.train: \"t.json\" -> \"u.json\"", "train.global_batch_size: 8 -> 16",
                                      "train.lr: 0.001 -> 0.002"}));
  EXPECT_TRUE(key_changes_math("lora.r"));
  EXPECT_TRUE(key_changes_math("train.seed"));
  EXPECT_FALSE(key_changes_math("checkpoint.keep_last"));
}

TEST(TrainingState, RoundTripsWithNanAndRefusesNonsense) {
  TrainingState s;
  s.step = 9;
  s.total_steps = 12;
  s.optimizer_updates = 8;
  s.sampler = {2, 8};
  s.loss_scaler = {{"scale", 1024.0}, {"growth_tracker", 3}};
  s.first_eval_loss = NAN;
  s.lr = 1e-3;
  const TrainingState back = TrainingState::from_json(parse_json(s.to_json().dump(), "s"), "s");
  EXPECT_EQ(back.step, 9);
  EXPECT_EQ(back.sampler.epoch, 2);
  EXPECT_EQ(back.sampler.consumed, 8);
  EXPECT_TRUE(std::isnan(back.first_eval_loss));
  EXPECT_EQ(back.loss_scaler, s.loss_scaler);
  Json bad = s.to_json();
  bad["optimizer_updates"] = 10;
  EXPECT_FT_ERROR(TrainingState::from_json(bad, "ts.json"), "optimizer_updates 10 > step 9");
  bad = s.to_json();
  bad["sampler"]["consumed"] = -1;
  EXPECT_FT_ERROR(TrainingState::from_json(bad, "ts.json"), "\"consumed\" must be an integer >= 0");
}

// Every element of every parameter lies in exactly one piece of one rank, for ZeRO's planned
// buckets and FSDP's explicit groups, on 1 to 5 ranks: so a checkpoint written on any world size
// has every element once and can be read into any other.
TEST(ShardPieces, CoverEveryElementOnceOnAnyWorldSize) {
  const std::vector<std::string> names = {"a", "b", "c", "d", "e"};
  const std::vector<std::int64_t> numels = {7, 1, 30, 4, 13};
  for (int world = 1; world <= 5; ++world) {
    for (int kind = 0; kind < 2; ++kind) {
      std::map<std::string, std::vector<int>> seen;
      for (std::size_t i = 0; i < names.size(); ++i) seen[names[i]].assign(static_cast<std::size_t>(numels[i]), 0);
      for (int rank = 0; rank < world; ++rank) {
        parallel::ShardLayout layout = kind == 0 ? parallel::ShardLayout(numels, world, rank, 16)
                                                 : parallel::ShardLayout(numels, world, rank, {{0, 1}, {2}, {3, 4}});
        std::vector<int> used(static_cast<std::size_t>(layout.shard_numel()), 0);
        for (const auto& p : layout.shard_pieces(names, numels)) {
          for (std::int64_t k = 0; k < p.length; ++k) {
            ++seen[p.name][static_cast<std::size_t>(p.param_offset + k)];
            ++used[static_cast<std::size_t>(p.shard_offset + k)];
          }
        }
        for (int u : used) EXPECT_LE(u, 1) << "world " << world << " rank " << rank;
      }
      for (const auto& [name, counts] : seen)
        for (int c : counts) EXPECT_EQ(c, 1) << name << " world " << world << " kind " << kind;
    }
  }
}

}  // namespace
}  // namespace ft
