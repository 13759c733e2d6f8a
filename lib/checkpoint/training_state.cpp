#include "checkpoint/training_state.h"

#include <cmath>

#include "util/error.h"

namespace ft::checkpoint {
namespace {

std::int64_t get_int(const Json& j, const char* key, const std::string& source) {
  FT_CHECK(j.contains(key), source, ": \"", key, "\" is missing");
  FT_CHECK(j[key].is_number_integer() && j[key].get<std::int64_t>() >= 0, source, ": \"", key,
           "\" must be an integer >= 0, found ", j[key].dump());
  return j[key].get<std::int64_t>();
}

double get_number(const Json& j, const char* key, const std::string& source) {
  FT_CHECK(j.contains(key), source, ": \"", key, "\" is missing");
  if (j[key].is_null()) return NAN;  // JSON has no NaN: written as null
  FT_CHECK(j[key].is_number(), source, ": \"", key, "\" must be a number, found ", j[key].dump());
  return j[key].get<double>();
}

Json number_or_null(double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); }

}  // namespace

Json TrainingState::to_json() const {
  return Json{{"step", step},
              {"total_steps", total_steps},
              {"optimizer_updates", optimizer_updates},
              {"sampler", {{"epoch", sampler.epoch}, {"consumed", sampler.consumed}}},
              {"loss_scaler", loss_scaler},
              {"spike_guard", spike_guard},
              {"spike_steps", spike_steps},
              {"skipped_steps", skipped_steps},
              {"overflow_steps", overflow_steps},
              {"first_eval_loss", number_or_null(first_eval_loss)},
              {"lr", number_or_null(lr)}};
}

TrainingState TrainingState::from_json(const Json& j, const std::string& source) {
  FT_CHECK(j.is_object(), source, ": expected a JSON object");
  TrainingState s;
  s.step = get_int(j, "step", source);
  s.total_steps = get_int(j, "total_steps", source);
  s.optimizer_updates = get_int(j, "optimizer_updates", source);
  FT_CHECK(s.optimizer_updates <= s.step, source, ": optimizer_updates ", s.optimizer_updates, " > step ", s.step);
  FT_CHECK(j.contains("sampler") && j["sampler"].is_object(), source, ": \"sampler\" must be an object");
  s.sampler.epoch = get_int(j["sampler"], "epoch", source + " sampler");
  s.sampler.consumed = get_int(j["sampler"], "consumed", source + " sampler");
  FT_CHECK(j.contains("loss_scaler") && j["loss_scaler"].is_object(), source, ": \"loss_scaler\" must be an object");
  s.loss_scaler = j["loss_scaler"];
  FT_CHECK(j.contains("spike_guard") && j["spike_guard"].is_object(), source, ": \"spike_guard\" must be an object");
  s.spike_guard = j["spike_guard"];
  s.spike_steps = get_int(j, "spike_steps", source);
  s.skipped_steps = get_int(j, "skipped_steps", source);
  s.overflow_steps = get_int(j, "overflow_steps", source);
  s.first_eval_loss = get_number(j, "first_eval_loss", source);
  s.lr = get_number(j, "lr", source);
  return s;
}

}  // namespace ft::checkpoint
