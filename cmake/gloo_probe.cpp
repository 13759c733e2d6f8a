// Built and run at configure time (cmake/FtTorch.cmake) for a LibTorch that does not come with
// its own Gloo headers: the Gloo headers found must compile with this LibTorch's c10d header and
// drive the Gloo compiled into it (one rank all-reduces and all-gathers over a HashStore).
#include <gloo/config.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <cstdio>

int main() {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto options = c10d::ProcessGroupGloo::Options::create();
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, 0, 1, options);
  std::vector<at::Tensor> tensors{at::arange(4, at::kFloat)};
  group->allreduce(tensors)->wait();
  std::vector<std::vector<at::Tensor>> gathered{{at::zeros({4})}};
  group->allgather(gathered, tensors)->wait();
  if (!tensors[0].equal(at::arange(4, at::kFloat)) || !gathered[0][0].equal(tensors[0])) return 1;
  std::printf("gloo=%d\n", GLOO_VERSION);
  return 0;
}
