// The loss-spike guard against hand-computed cases of OLMo-core's rule.
#include <gtest/gtest.h>

#include "optim/spike_guard.h"
#include "test_support.h"

namespace ft::optim {
namespace {

TEST(SpikeGuard, SkipsWhatIsSigmaStandardDeviationsAboveTheWindow) {
  SpikeGuard guard({4, 3.0});  // active from max(2, 4 / 2) = 2 values, but a std needs 2 before the current
  EXPECT_FALSE(guard.is_spike(1.0, 2.0));
  EXPECT_FALSE(guard.is_spike(1.1, 2.0));
  EXPECT_FALSE(guard.is_spike(0.9, 2.0));
  EXPECT_FALSE(guard.is_spike(1.0, 2.0));
  // Before: 1.0 1.1 0.9 1.0: mean 1.0, sample std 0.0816; 1.2 is 2.4 std above: kept.
  EXPECT_FALSE(guard.is_spike(1.2, 2.0));
  // Before (window 4): 1.1 0.9 1.0 1.2: mean 1.05, std 0.129; 5.0 is far above: skipped.
  EXPECT_TRUE(guard.is_spike(5.0, 2.0));
  // The spike stays in the window (as in OLMo-core): mean 2.025, std 1.99; 3.0 is not a spike.
  EXPECT_FALSE(guard.is_spike(3.0, 2.0));
  // A gradient-norm spike alone is enough; the loss std is large now, the norm's is 0.
  EXPECT_TRUE(guard.is_spike(1.0, 2.5));
  // Equal to a constant history is not above it.
  SpikeGuard flat({4, 3.0});
  for (int i = 0; i < 6; ++i) EXPECT_FALSE(flat.is_spike(1.0, 1.0));
}

TEST(SpikeGuard, StateRoundTripsAndIsChecked) {
  SpikeGuard a({4, 3.0});
  for (double v : {1.0, 1.1, 0.9, 1.0}) a.is_spike(v, v);
  SpikeGuard b({4, 3.0});
  b.load_state_json(parse_json(a.state_json().dump(), "s"), "s");
  EXPECT_EQ(a.state_json(), b.state_json());
  EXPECT_EQ(a.is_spike(5.0, 1.0), b.is_spike(5.0, 1.0));
  SpikeGuard small({2, 3.0});
  EXPECT_FT_ERROR(small.load_state_json(a.state_json(), "ck/training_state.json"), "does not fit a window of 2");
  EXPECT_FT_ERROR(SpikeGuard({1, 3.0}), "train.spike_window must be >= 2");
}

}  // namespace
}  // namespace ft::optim
