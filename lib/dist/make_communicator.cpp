// The backend choice (auto -> NCCL for CUDA, Gloo for CPU) and the start-up sequence of a
// distributed program.
#include "dist/make_communicator.h"

#include "dist/gloo_communicator.h"
#include "dist/nccl_communicator.h"
#include "dist/rendezvous.h"
#include "util/error.h"
#include "util/log.h"

namespace ft::dist {

bool nccl_compiled() {
#ifdef FT_WITH_NCCL
  return true;
#else
  return false;
#endif
}

std::unique_ptr<Communicator> make_communicator(const std::string& backend, const c10::Device& device,
                                                const RankEnv& env, std::shared_ptr<Store> store, double timeout_s) {
  FT_CHECK(backend == "auto" || backend == "gloo" || backend == "nccl",
           "parallel.backend: expected auto, gloo or nccl, got \"", backend, "\"");
  const bool cuda = device.is_cuda();
  const std::string chosen = backend == "auto" ? (cuda ? "nccl" : "gloo") : backend;
  if (chosen == "nccl") {
    FT_CHECK(nccl_compiled(), "parallel.backend ", backend, backend == "auto" ? " picked nccl for device " : " on device ",
             device, ", but this build of ft has no NCCL: rebuild where CMake finds the CUDA toolkit with NCCL ",
             "(nccl.h and libnccl under /usr/local/cuda or CUDA_HOME; CMake option FT_WITH_NCCL=ON)",
             cuda ? "" : ", or use parallel.backend gloo for CPU training");
    FT_CHECK(cuda, "parallel.backend nccl needs a CUDA device, but the device is ", device,
             ": use gloo (or auto) for CPU tensors");
  } else {
    FT_CHECK(!cuda, "parallel.backend gloo takes CPU tensors in this build, but the device is ", device,
             ": use nccl (or auto) for CUDA tensors");
  }
  if (!env.distributed()) return make_single_process_communicator();
  FT_CHECK(store != nullptr, "make_communicator for rank ", env.rank, " of ", env.world_size,
           ": no store (rendezvous() first)");
#ifdef FT_WITH_NCCL
  if (chosen == "nccl") {
    const int index = device.has_index() ? device.index() : env.local_rank;
    return make_nccl_communicator(env, std::move(store), index, timeout_s);
  }
#endif
  return make_gloo_communicator(env, std::move(store), timeout_s);
}

World join_world(const config::RunConfig& config, const c10::Device& device) {
  World world;
  world.env = read_rank_env();
  log::set_rank(world.env.rank, world.env.world_size);
  const double rendezvous_s = rendezvous_timeout_s(config.parallel.timeout_s);
  world.store = rendezvous(world.env, rendezvous_s);
  check_same_config(world.store, world.env, config.resolved, rendezvous_s);
  world.comm = make_communicator(config.parallel.backend, device, world.env, world.store, config.parallel.timeout_s);
  return world;
}

}  // namespace ft::dist
