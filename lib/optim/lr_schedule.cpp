// The lambdas of transformers' optimization.py, transcribed (same float conversions, same max(1, .)
// guards), plus the min-lr floor `factor * (1 - min) + min` of its cosine-with-min-lr lambda,
// applied to linear too. Values are pinned against tests/data/optim_reference.json.
#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "config/run_config.h"
#include "util/error.h"

namespace ft::optim {

LrScheduleKind parse_lr_schedule_kind(const std::string& name) {
  const int index = config::find_choice<LrScheduleKind>(name);
  if (index >= 0) return static_cast<LrScheduleKind>(index);
  FT_CHECK(false, "unknown lr_schedule \"", name, "\": expected constant, linear or cosine");
  return LrScheduleKind::kConstant;
}

const char* lr_schedule_name(LrScheduleKind kind) { return config::choice_name(kind).c_str(); }

LrSchedule::LrSchedule(LrScheduleKind kind, double base_lr, std::int64_t warmup_steps, std::int64_t total_steps,
                       double min_lr_ratio)
    : kind_(kind), base_lr_(base_lr), warmup_steps_(warmup_steps), total_steps_(total_steps),
      min_lr_ratio_(min_lr_ratio) {
  FT_CHECK(std::isfinite(base_lr) && base_lr >= 0, "lr schedule: lr must be a finite number >= 0, got ", base_lr);
  FT_CHECK(warmup_steps >= 0, "lr schedule: warmup_steps must be >= 0, got ", warmup_steps);
  FT_CHECK(total_steps >= 0, "lr schedule: total_steps must be >= 0, got ", total_steps);
  FT_CHECK(min_lr_ratio >= 0 && min_lr_ratio <= 1, "lr schedule: min_lr_ratio must be in [0, 1], got ",
           min_lr_ratio);
}

LrSchedule LrSchedule::from_config(const config::TrainConfig& train, std::int64_t total_steps) {
  return LrSchedule(train.lr_schedule, train.lr, train.warmup_steps, total_steps,
                    train.min_lr_ratio);
}

double LrSchedule::factor(std::int64_t step) const {
  FT_CHECK(step >= 0, "lr schedule: step must be >= 0, got ", step);
  const double s = static_cast<double>(step);
  const double w = static_cast<double>(warmup_steps_);
  const double t = static_cast<double>(total_steps_);
  if (kind_ == LrScheduleKind::kConstant) {
    // _get_constant_schedule_with_warmup_lr_lambda
    if (step < warmup_steps_) return s / std::max(1.0, w);
    return 1.0;
  }
  // The three lambdas share their warmup: float(current_step) / float(max(1, num_warmup_steps)).
  if (step < warmup_steps_) return s / std::max(1.0, w);
  const double decay_steps = std::max(1.0, t - w);
  if (kind_ == LrScheduleKind::kLinear) {
    // _get_linear_schedule_with_warmup_lr_lambda, then the min-lr floor.
    const double f = std::max(0.0, (t - s) / decay_steps);
    return f * (1.0 - min_lr_ratio_) + min_lr_ratio_;
  }
  // _get_cosine_schedule_with_warmup_lr_lambda with num_cycles = 0.5 and min_lr_rate.
  constexpr double kPi = 3.141592653589793;
  constexpr double kNumCycles = 0.5;
  const double progress = (s - w) / decay_steps;
  double f = 0.5 * (1.0 + std::cos(kPi * kNumCycles * 2.0 * progress));
  f = f * (1.0 - min_lr_ratio_) + min_lr_ratio_;
  return std::max(0.0, f);
}

}  // namespace ft::optim
