#include "checkpoint/rng_state.h"

#include <ATen/Context.h>
#include <ATen/core/Generator.h>

#include <mutex>

#include "util/error.h"

namespace ft::checkpoint {
namespace {

at::Tensor state_of(c10::Device device) {
  at::Generator g = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(g.mutex());
  return g.get_state().clone();
}

void set_state(c10::Device device, const at::Tensor& state) {
  at::Generator g = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(g.mutex());
  g.set_state(state);
}

}  // namespace

io::NamedTensors capture_rng(c10::Device device) {
  io::NamedTensors out{{"rng.cpu", state_of(c10::kCPU)}};
  if (device.is_cuda()) out.emplace_back("rng.cuda", state_of(device));
  return out;
}

void restore_rng(const io::SafetensorsReader& file, c10::Device device) {
  try {
    set_state(c10::kCPU, file.load("rng.cpu"));
    if (device.is_cuda()) {
      FT_CHECK(file.contains("rng.cuda"), file.path(), ": no CUDA generator state (saved by a CPU run)");
      set_state(device, file.load("rng.cuda"));
    }
  } catch (const c10::Error& e) {
    FT_CHECK(false, file.path(), ": the random generator state does not fit this LibTorch: ", e.what_without_backtrace());
  }
}

}  // namespace ft::checkpoint
