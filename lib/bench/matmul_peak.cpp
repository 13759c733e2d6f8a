#include "bench/matmul_peak.h"

#include <torch/torch.h>

#include <algorithm>

#include "util/timer.h"

namespace ft::bench {

MatmulPeak measure_matmul_peak(c10::Device device, c10::ScalarType dtype, int threads, std::int64_t n) {
  torch::NoGradGuard no_grad;
  MatmulPeak peak;
  const int saved_threads = at::get_num_threads();
  if (device.is_cpu()) {
    at::set_num_threads(threads);
    peak.threads = threads;
  }
  // Large enough to reach the BLAS's / tensor cores' steady rate, small enough to take < 1 s.
  peak.n = n > 0 ? n : device.is_cpu() ? 1024 : 8192;
  auto options = torch::TensorOptions().dtype(dtype).device(device);
  const torch::Tensor a = torch::randn({peak.n, peak.n}, options), b = torch::randn({peak.n, peak.n}, options);
  torch::Tensor c = torch::mm(a, b);
  (void)c.sum().item<double>();  // warm up, and wait for the device
  double best = 1e30;
  Stopwatch total;
  for (int rep = 0; rep < 20 && (rep < 3 || total.seconds() < 1.0); ++rep) {
    Stopwatch clock;
    c = torch::mm(a, b);
    (void)c.sum().item<double>();  // the product is done when its sum is back on the host
    best = std::min(best, clock.seconds());
  }
  peak.flops_per_s = 2.0 * static_cast<double>(peak.n) * static_cast<double>(peak.n) * static_cast<double>(peak.n) / best;
  if (device.is_cpu()) at::set_num_threads(saved_threads);
  return peak;
}

}  // namespace ft::bench
