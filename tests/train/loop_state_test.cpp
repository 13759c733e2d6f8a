// LoopState saves to a checkpoint's TrainingState and restores from it as a whole: every field
// the loop carries comes back (through the JSON a checkpoint writes), and the spike history only
// with train.skip_spikes.
#include <gtest/gtest.h>

#include <cmath>

#include "train/loop_state.h"

namespace ft::train {
namespace {

config::TrainConfig train_config(bool skip_spikes) {
  config::TrainConfig t;
  t.skip_spikes = skip_spikes;
  t.spike_window = 8;
  t.loss_scale_init = 1024;
  return t;
}

LoopState busy_state(bool skip_spikes) {
  LoopState s(train_config(skip_spikes));
  s.step = 17;
  s.total_steps = 40;
  s.position.epoch = 1;
  s.position.consumed = 96;
  s.scaler.update(true);  // 1024 -> 512
  for (int i = 0; i < 5; ++i) s.spike_guard.record(2.0 + i, 1.0 + i);
  s.skipped_steps = 2;
  s.overflow_steps = 3;
  s.spike_steps = 4;
  s.first_eval_loss = 3.25;
  s.last_lr = 1.5e-4;
  return s;
}

TEST(LoopState, RoundTripsThroughACheckpointsTrainingState) {
  const LoopState saved = busy_state(true);
  const checkpoint::TrainingState written = saved.to_training_state(/*optimizer_updates=*/12);
  EXPECT_EQ(written.optimizer_updates, 12);
  const checkpoint::TrainingState read = checkpoint::TrainingState::from_json(written.to_json(), "test");
  LoopState restored(train_config(true));
  restored.restore(read, "test");
  EXPECT_EQ(restored.step, 17);
  EXPECT_EQ(restored.total_steps, 40);
  EXPECT_EQ(restored.position.epoch, 1);
  EXPECT_EQ(restored.position.consumed, 96);
  EXPECT_EQ(restored.scaler.scale(), 512.0f);
  EXPECT_EQ(restored.spike_guard.state_json(), saved.spike_guard.state_json());
  EXPECT_EQ(restored.skipped_steps, 2);
  EXPECT_EQ(restored.overflow_steps, 3);
  EXPECT_EQ(restored.spike_steps, 4);
  EXPECT_DOUBLE_EQ(restored.first_eval_loss, 3.25);
  EXPECT_DOUBLE_EQ(restored.last_lr, 1.5e-4);
  EXPECT_EQ(restored.to_training_state(12).to_json(), written.to_json());
}

TEST(LoopState, SpikeHistoryTravelsOnlyWithSkipSpikes) {
  const checkpoint::TrainingState written = busy_state(false).to_training_state(0);
  EXPECT_TRUE(written.spike_guard.empty());
  LoopState restored(train_config(false));
  restored.restore(written, "test");
  EXPECT_EQ(restored.spike_guard.state_json(), LoopState(train_config(false)).spike_guard.state_json());
}

TEST(LoopState, AFreshStateHasNoEvaluationYet) {
  const LoopState fresh(train_config(false));
  EXPECT_TRUE(std::isnan(fresh.first_eval_loss));
  EXPECT_TRUE(std::isnan(fresh.to_training_state(0).first_eval_loss));
}

}  // namespace
}  // namespace ft::train
