// GradScaler's update rule (aten _amp_update_scale_, transcribed: fp32 scale, the products taken
// in double and rounded to fp32) and its unscale (fused CPU loop for contiguous fp32 gradients,
// LibTorch ops elsewhere). Pinned against tests/data/optim_reference.json.
#include "optim/loss_scaler.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <atomic>
#include <cmath>

#include "optim/cpu_kernels.h"
#include "util/error.h"

namespace ft::optim {

LossScaler::LossScaler(LossScalerOptions options) : options_(options) {
  FT_CHECK(std::isfinite(options.init_scale) && options.init_scale > 0,
           "loss scaler: init_scale must be a finite number > 0, got ", options.init_scale);
  FT_CHECK(options.growth_factor > 1, "loss scaler: growth_factor must be > 1, got ", options.growth_factor);
  FT_CHECK(options.backoff_factor > 0 && options.backoff_factor < 1,
           "loss scaler: backoff_factor must be in (0, 1), got ", options.backoff_factor);
  FT_CHECK(options.growth_interval > 0, "loss scaler: growth_interval must be > 0, got ", options.growth_interval);
  scale_ = static_cast<float>(options.init_scale);
  FT_CHECK(std::isfinite(scale_), "loss scaler: init_scale ", options.init_scale, " overflows fp32");
}

float LossScaler::inv_scale() const {
  // grad_scaler.py: inv_scale = self._scale.double().reciprocal().float()
  return static_cast<float>(1.0 / static_cast<double>(scale_));
}

bool LossScaler::unscale_(at::TensorList grads) const {
  at::NoGradGuard no_grad;
  const float inv = inv_scale();
  bool found = false;
  for (const at::Tensor& t : grads) {
    if (!t.defined() || t.numel() == 0) continue;
    if (t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous()) {
      float* x = t.data_ptr<float>();
      std::atomic<bool> any{false};
      at::parallel_for(0, t.numel(), 1 << 18, [&](std::int64_t begin, std::int64_t end) {
        if (cpu::unscale_and_check(x + begin, end - begin, inv)) any = true;
      });
      found = found || any.load();
    } else {
      found = found || !at::isfinite(t).all().item<bool>();
      t.mul_(static_cast<double>(inv));
    }
  }
  return found;
}

bool LossScaler::update(bool found_inf) {
  if (found_inf) {
    scale_ = static_cast<float>(static_cast<double>(scale_) * options_.backoff_factor);
    growth_tracker_ = 0;
    return false;
  }
  // "Entering this branch means we just carried out a successful step, so growth_tracker is
  // incremented before comparing to growth_interval."
  const std::int64_t successful = growth_tracker_ + 1;
  if (successful == options_.growth_interval) {
    const float grown = static_cast<float>(static_cast<double>(scale_) * options_.growth_factor);
    if (std::isfinite(grown)) scale_ = grown;  // do not grow past fp32's range to Inf
    growth_tracker_ = 0;
  } else {
    growth_tracker_ = successful;
  }
  return true;
}

void LossScaler::load_state(const LossScalerState& state) {
  FT_CHECK(std::isfinite(state.scale) && state.scale > 0, "loss scaler state: scale must be a finite number > 0, got ",
           state.scale);
  FT_CHECK(state.growth_tracker >= 0 && state.growth_tracker < options_.growth_interval,
           "loss scaler state: growth_tracker must be in [0, growth_interval = ", options_.growth_interval,
           "), got ", state.growth_tracker);
  scale_ = state.scale;
  growth_tracker_ = state.growth_tracker;
}

Json LossScaler::state_json() const {
  return Json{{"scale", static_cast<double>(scale_)}, {"growth_tracker", growth_tracker_}};
}

void LossScaler::load_state_json(const Json& json, const std::string& source) {
  FT_CHECK(json.is_object(), source, ": loss scaler state must be an object, got ", describe_json(json));
  for (const auto& [key, value] : json.items()) {
    FT_CHECK(key == "scale" || key == "growth_tracker", source, ": unknown loss scaler state key \"", key,
             "\" (expected scale, growth_tracker)");
  }
  FT_CHECK(json.contains("scale") && json["scale"].is_number(), source,
           ": loss scaler state needs a number \"scale\", got ",
           json.contains("scale") ? describe_json(json["scale"]) : std::string("nothing"));
  FT_CHECK(json.contains("growth_tracker") && json["growth_tracker"].is_number_integer(), source,
           ": loss scaler state needs an integer \"growth_tracker\", got ",
           json.contains("growth_tracker") ? describe_json(json["growth_tracker"]) : std::string("nothing"));
  LossScalerState state{static_cast<float>(json["scale"].get<double>()), json["growth_tracker"].get<std::int64_t>()};
  try {
    load_state(state);
  } catch (const Error& e) {
    throw Error(source + ": " + e.what());
  }
}

}  // namespace ft::optim
