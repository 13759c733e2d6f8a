#include "optim/spike_guard.h"

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace ft::optim {
namespace {

// Whether the last value is more than sigma sample standard deviations above the mean of the others.
bool above(const std::deque<double>& values, double sigma) {
  const std::size_t n = values.size() - 1;
  double mean = 0;
  for (std::size_t i = 0; i < n; ++i) mean += values[i];
  mean /= static_cast<double>(n);
  double sq = 0;
  for (std::size_t i = 0; i < n; ++i) sq += (values[i] - mean) * (values[i] - mean);
  const double std = std::sqrt(sq / static_cast<double>(n - 1));
  return values.back() - mean > sigma * std;
}

void push(std::deque<double>& values, double v, std::size_t window) {
  values.push_back(v);
  while (values.size() > window + 1) values.pop_front();
}

}  // namespace

SpikeGuard::SpikeGuard(SpikeGuardOptions options) : options_(options) {
  FT_CHECK(options_.window >= 2, "train.spike_window must be >= 2, got ", options_.window);
  FT_CHECK(options_.sigma > 0, "train.spike_sigma must be > 0, got ", options_.sigma);
}

bool SpikeGuard::is_spike(double loss, double grad_norm) {
  const bool spike = would_spike(loss, grad_norm);
  record(loss, grad_norm);
  return spike;
}

bool SpikeGuard::would_spike(double loss, double grad_norm) const {
  std::deque<double> losses = losses_, grad_norms = grad_norms_;
  push(losses, loss, options_.window);
  push(grad_norms, grad_norm, options_.window);
  if (losses.size() < std::max<std::size_t>(2, options_.window / 2) || losses.size() < 3) return false;
  return above(losses, options_.sigma) || above(grad_norms, options_.sigma);
}

void SpikeGuard::record(double loss, double grad_norm) {
  push(losses_, loss, options_.window);
  push(grad_norms_, grad_norm, options_.window);
}

Json SpikeGuard::state_json() const {
  return Json{{"losses", Json(std::vector<double>(losses_.begin(), losses_.end()))},
              {"grad_norms", Json(std::vector<double>(grad_norms_.begin(), grad_norms_.end()))}};
}

void SpikeGuard::load_state_json(const Json& j, const std::string& source) {
  auto read = [&](const char* key) {
    FT_CHECK(j.is_object() && j.contains(key) && j[key].is_array(), source, ": spike guard \"", key,
             "\" must be an array of numbers");
    std::deque<double> out;
    for (const Json& v : j[key]) {
      FT_CHECK(v.is_number(), source, ": spike guard \"", key, "\" holds ", v.dump(), ", not a number");
      out.push_back(v.get<double>());
    }
    return out;
  };
  std::deque<double> losses = read("losses"), grad_norms = read("grad_norms");
  FT_CHECK(losses.size() == grad_norms.size() && losses.size() <= options_.window + 1, source,
           ": spike guard history of ", losses.size(), " losses and ", grad_norms.size(),
           " gradient norms does not fit a window of ", options_.window);
  losses_ = std::move(losses);
  grad_norms_ = std::move(grad_norms);
}

}  // namespace ft::optim
