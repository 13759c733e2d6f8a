// Learning-rate schedules with linear warmup, as Hugging Face transformers' LambdaLR lambdas:
// constant (get_constant_schedule_with_warmup), linear (get_linear_schedule_with_warmup) and
// cosine (get_cosine_with_min_lr_schedule_with_warmup, half a cycle), with a min_lr_ratio floor
// for linear and cosine. No restarts, polynomial or inverse-sqrt schedules.
#pragma once

#include <cstdint>
#include <string>

#include "config/choices.h"

namespace ft::config {
struct TrainConfig;
}

namespace ft::optim {

using LrScheduleKind = config::LrSchedule;  // train.lr_schedule

// "constant" | "linear" | "cosine" (train.lr_schedule); anything else throws ft::Error.
LrScheduleKind parse_lr_schedule_kind(const std::string& name);
const char* lr_schedule_name(LrScheduleKind kind);

class LrSchedule {
 public:
  // warmup_steps >= 0; total_steps >= 0 (the optimizer steps of the run; unused by constant);
  // min_lr_ratio in [0, 1] (linear and cosine decay to base_lr * min_lr_ratio).
  LrSchedule(LrScheduleKind kind, double base_lr, std::int64_t warmup_steps, std::int64_t total_steps,
             double min_lr_ratio = 0.0);
  // From train.lr, train.lr_schedule, train.warmup_steps and train.min_lr_ratio.
  static LrSchedule from_config(const config::TrainConfig& train, std::int64_t total_steps);

  // The multiplier for optimizer step `step` (0-based: the first update uses step 0, as LambdaLR
  // does). Past total_steps it is what transformers' lambda gives there: linear stays at the
  // floor, cosine (like transformers') rises again along the cosine.
  double factor(std::int64_t step) const;
  // base_lr * factor(step): the lr to pass to AdamW::step for that update.
  double lr(std::int64_t step) const { return base_lr_ * factor(step); }

  LrScheduleKind kind() const { return kind_; }
  double base_lr() const { return base_lr_; }
  std::int64_t warmup_steps() const { return warmup_steps_; }
  std::int64_t total_steps() const { return total_steps_; }
  double min_lr_ratio() const { return min_lr_ratio_; }

 private:
  LrScheduleKind kind_;
  double base_lr_;
  std::int64_t warmup_steps_, total_steps_;
  double min_lr_ratio_;
};

}  // namespace ft::optim
