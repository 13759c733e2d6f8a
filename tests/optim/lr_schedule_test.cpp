// ft::optim::LrSchedule against transformers' lambdas driven through torch's LambdaLR
// (tests/data/optim_reference.json): the lr each optimizer step s (0-based) uses, for constant,
// linear and cosine with several (warmup, total, min_lr_ratio), a few steps past the end too.
// Same double arithmetic in the same order: agreement to 1e-13 relative (cos may differ in libm).
#include <gtest/gtest.h>

#include "config/run_config.h"
#include "optim/lr_schedule.h"
#include "optim_test_util.h"

namespace ft::optim {
namespace {

TEST(LrSchedule, MatchesTransformersLambdasThroughLambdaLR) {
  int checked = 0;
  for (const Json& c : test::reference()["schedules"]) {
    const std::string kind = c["kind"];
    const std::int64_t warmup = c["warmup_steps"], total = c["total_steps"];
    SCOPED_TRACE(kind + " warmup " + std::to_string(warmup) + " total " + std::to_string(total));
    LrSchedule schedule(parse_lr_schedule_kind(kind), c["base_lr"], warmup, total, c["min_lr_ratio"]);
    const auto& lrs = c["lr"];
    for (std::size_t s = 0; s < lrs.size(); ++s) {
      const double expected = lrs[s];
      EXPECT_NEAR(schedule.lr(static_cast<std::int64_t>(s)), expected, 1e-13 * std::abs(expected)) << "step " << s;
      ++checked;
    }
  }
  EXPECT_GT(checked, 300);
}

TEST(LrSchedule, ShapesAtTheLandmarks) {
  const LrSchedule cosine(LrScheduleKind::kCosine, 1.0, 10, 110, 0.1);
  EXPECT_EQ(cosine.lr(0), 0.0);                  // the first update of a warmup uses lr 0, as in HF
  EXPECT_DOUBLE_EQ(cosine.lr(5), 0.5);
  EXPECT_DOUBLE_EQ(cosine.lr(10), 1.0);          // peak right after warmup
  EXPECT_NEAR(cosine.lr(60), 0.55, 1e-15);       // halfway: (1 + min) / 2
  EXPECT_NEAR(cosine.lr(110), 0.1, 1e-15);       // floor at total_steps
  const LrSchedule linear(LrScheduleKind::kLinear, 2.0, 0, 100, 0.25);
  EXPECT_DOUBLE_EQ(linear.lr(0), 2.0);
  EXPECT_DOUBLE_EQ(linear.lr(50), 2.0 * (0.5 * 0.75 + 0.25));
  EXPECT_DOUBLE_EQ(linear.lr(100), 0.5);
  EXPECT_DOUBLE_EQ(linear.lr(1000), 0.5);        // stays at the floor past the end
  const LrSchedule constant(LrScheduleKind::kConstant, 3.0, 4, 0, 0.5);
  EXPECT_DOUBLE_EQ(constant.lr(2), 1.5);
  EXPECT_DOUBLE_EQ(constant.lr(4000), 3.0);      // no floor, no total
}

TEST(LrSchedule, FromConfig) {
  config::TrainConfig train;
  train.lr = 2e-4;
  train.lr_schedule = LrScheduleKind::kLinear;
  train.warmup_steps = 3;
  train.min_lr_ratio = 0.0;
  const LrSchedule s = LrSchedule::from_config(train, 13);
  EXPECT_EQ(s.kind(), LrScheduleKind::kLinear);
  EXPECT_DOUBLE_EQ(s.lr(8), 2e-4 * 0.5);
  EXPECT_STREQ(lr_schedule_name(s.kind()), "linear");
}

TEST(LrSchedule, Errors) {
  EXPECT_FT_ERROR(parse_lr_schedule_kind("cosin"),
                  "unknown lr_schedule \"cosin\": expected constant, linear or cosine");
  EXPECT_FT_ERROR(LrSchedule(LrScheduleKind::kLinear, 1e-3, -1, 10), "lr schedule: warmup_steps must be >= 0, got -1");
  EXPECT_FT_ERROR(LrSchedule(LrScheduleKind::kLinear, 1e-3, 0, -10), "lr schedule: total_steps must be >= 0, got -10");
  EXPECT_FT_ERROR(LrSchedule(LrScheduleKind::kCosine, 1e-3, 0, 10, 1.5),
                  "lr schedule: min_lr_ratio must be in [0, 1], got 1.5");
  EXPECT_FT_ERROR(LrSchedule(LrScheduleKind::kCosine, -1, 0, 10), "lr schedule: lr must be a finite number >= 0");
  EXPECT_FT_ERROR(LrSchedule(LrScheduleKind::kCosine, 1, 0, 10).lr(-1), "lr schedule: step must be >= 0, got -1");
}

}  // namespace
}  // namespace ft::optim
