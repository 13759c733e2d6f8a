// decide_update on its own, branch by branch: what the loop does with a step once its loss and
// gradient norm are known (train/update_decision.h). The whole-run tests (test_train, test_faults)
// check the same branches through real runs; these pin the decision itself.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "train/update_decision.h"

namespace ft::train {
namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kNan = std::numeric_limits<double>::quiet_NaN();

UpdatePolicy policy(bool loss_scaling, bool skip_spikes, config::OnNonfinite on_nonfinite) {
  UpdatePolicy p;
  p.loss_scaling = loss_scaling;
  p.skip_spikes = skip_spikes;
  p.on_nonfinite = on_nonfinite;
  return p;
}

// A guard whose window holds `n` steps of loss ~2 and norm ~1 (a little noise, so a spread exists).
optim::SpikeGuard warmed_guard(int n) {
  optim::SpikeGuard guard(optim::SpikeGuardOptions{8, 6.0});
  for (int i = 0; i < n; ++i) guard.record(2.0 + 0.01 * (i % 3), 1.0 + 0.01 * (i % 2));
  return guard;
}

TEST(DecideUpdate, FiniteStepIsApplied) {
  for (bool scaling : {false, true})
    for (auto on : {config::OnNonfinite::kStop, config::OnNonfinite::kSkip})
      EXPECT_EQ(decide_update(2.0, 1.0, policy(scaling, false, on), nullptr), UpdateDecision::kApply);
}

TEST(DecideUpdate, InfiniteGradientsWithLossScalingAreAnOverflow) {
  for (auto on : {config::OnNonfinite::kStop, config::OnNonfinite::kSkip}) {
    EXPECT_EQ(decide_update(2.0, kInf, policy(true, false, on), nullptr), UpdateDecision::kSkipOverflow);
    EXPECT_EQ(decide_update(2.0, kNan, policy(true, true, on), nullptr), UpdateDecision::kSkipOverflow);
  }
}

TEST(DecideUpdate, NonFiniteWithoutScalingStopsOrSkipsAsConfigured) {
  const auto stop = policy(false, false, config::OnNonfinite::kStop);
  const auto skip = policy(false, false, config::OnNonfinite::kSkip);
  EXPECT_EQ(decide_update(kNan, 1.0, stop, nullptr), UpdateDecision::kStop);
  EXPECT_EQ(decide_update(2.0, kInf, stop, nullptr), UpdateDecision::kStop);
  EXPECT_EQ(decide_update(kNan, 1.0, skip, nullptr), UpdateDecision::kSkipNonfinite);
  EXPECT_EQ(decide_update(2.0, kInf, skip, nullptr), UpdateDecision::kSkipNonfinite);
}

TEST(DecideUpdate, NonFiniteLossIsNeverAnOverflow) {
  // Loss scaling covers only gradients overflowing at the scale: a NaN loss is the model's.
  EXPECT_EQ(decide_update(kNan, kNan, policy(true, false, config::OnNonfinite::kStop), nullptr), UpdateDecision::kStop);
  EXPECT_EQ(decide_update(kInf, 1.0, policy(true, false, config::OnNonfinite::kSkip), nullptr),
            UpdateDecision::kSkipNonfinite);
}

TEST(DecideUpdate, SpikesAreSkippedOnlyWithSkipSpikes) {
  const optim::SpikeGuard guard = warmed_guard(8);
  const auto with = policy(false, true, config::OnNonfinite::kStop);
  const auto without = policy(false, false, config::OnNonfinite::kStop);
  EXPECT_EQ(decide_update(2.01, 1.0, with, &guard), UpdateDecision::kApply);
  EXPECT_EQ(decide_update(50.0, 1.0, with, &guard), UpdateDecision::kSkipSpike);   // the loss spikes
  EXPECT_EQ(decide_update(2.0, 40.0, with, &guard), UpdateDecision::kSkipSpike);   // the norm spikes
  EXPECT_EQ(decide_update(50.0, 1.0, without, &guard), UpdateDecision::kApply);
  EXPECT_EQ(decide_update(50.0, 1.0, with, nullptr), UpdateDecision::kApply);
}

TEST(DecideUpdate, DecidingDoesNotRecord) {
  // The decision only reads the guard: the loop records the step's values after deciding.
  const optim::SpikeGuard guard = warmed_guard(8);
  const Json before = guard.state_json();
  decide_update(50.0, 1.0, policy(false, true, config::OnNonfinite::kStop), &guard);
  EXPECT_EQ(guard.state_json(), before);
}

TEST(DecideUpdate, AGuardStillFillingNeverSpikes) {
  const optim::SpikeGuard guard = warmed_guard(2);  // under window / 2 values
  EXPECT_EQ(decide_update(1e6, 1e6, policy(false, true, config::OnNonfinite::kStop), &guard), UpdateDecision::kApply);
}

TEST(DecideUpdate, WouldSpikeAgreesWithIsSpike) {
  optim::SpikeGuard a = warmed_guard(8), b = warmed_guard(8);
  for (double loss : {2.0, 2.02, 9.0, 2.01, 80.0}) {
    const bool predicted = a.would_spike(loss, 1.0);
    EXPECT_EQ(predicted, b.is_spike(loss, 1.0)) << loss;
    a.record(loss, 1.0);
  }
  EXPECT_EQ(a.state_json(), b.state_json());
}

}  // namespace
}  // namespace ft::train
