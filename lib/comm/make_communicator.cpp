// The backend choice (auto -> NCCL for CUDA, Gloo for CPU) and the start-up sequence of a
// distributed program.
#include "comm/make_communicator.h"

#include <torch/version.h>

#include "comm/gloo_communicator.h"
#include "comm/nccl_communicator.h"
#include "comm/rendezvous.h"
#include "util/build_info.h"
#include "util/error.h"
#include "util/log.h"

namespace ft::comm {

bool nccl_compiled() {
#ifdef FT_WITH_NCCL
  return true;
#else
  return false;
#endif
}

std::string check_backend(const std::string& backend, const c10::Device& device) {
  FT_CHECK(backend == "auto" || backend == "gloo" || backend == "nccl",
           "parallel.backend: expected auto, gloo or nccl, got \"", backend, "\"");
  const bool cuda = device.is_cuda();
  const std::string chosen = backend == "auto" ? (cuda ? "nccl" : "gloo") : backend;
  const std::string build = str("this build (LibTorch ", TORCH_VERSION,
                                FT_TORCH_CUDA ? str(" with CUDA ", FT_TORCH_CUDA_VERSION) : std::string(", CPU only"),
                                nccl_compiled() ? ", NCCL communicator" : ", no NCCL communicator", ")");
  if (chosen == "nccl") {
    FT_CHECK(nccl_compiled(), "parallel.backend ", backend, backend == "auto" ? " picked nccl for device " : " on device ",
             device, ", but ", build, " has no NCCL: rebuild where CMake finds NCCL (the pip LibTorch's own: "
             "scripts/setup.sh --libtorch pip && scripts/build.sh --libtorch pip; or FT_NCCL_ROOT)",
             cuda ? "" : ", or use parallel.backend gloo for CPU training");
    FT_CHECK(cuda, "parallel.backend nccl needs a CUDA device, but the device is ", device, ": ", build,
             FT_TORCH_CUDA ? " sees no GPU (check nvidia-smi and CUDA_VISIBLE_DEVICES)"
                           : " cannot use one (scripts/build.sh --libtorch pip builds against a CUDA LibTorch)",
             "; or use gloo (or auto) for CPU training");
  } else {
    FT_CHECK(!cuda, "parallel.backend gloo takes CPU tensors in this build, but the device is ", device,
             ": use nccl (or auto) for CUDA tensors");
  }
  return chosen;
}

std::unique_ptr<Communicator> make_communicator(const std::string& backend, const c10::Device& device,
                                                const RankEnv& env, std::shared_ptr<Store> store, double timeout_s) {
  const std::string chosen = check_backend(backend, device);
  // A world of one skips the backend, except NCCL named explicitly: one GPU then runs the same
  // collectives (and the same staging of the step's numbers) as eight.
  const bool lone_nccl = backend == "nccl";
  if (!env.distributed() && !lone_nccl) return make_single_process_communicator();
  FT_CHECK(store != nullptr || !env.distributed(), "make_communicator for rank ", env.rank, " of ", env.world_size,
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
  const std::string backend = config::choice_name(config.parallel.backend);
  check_backend(backend, device);  // before any rank waits for another
  const double rendezvous_s = rendezvous_timeout_s(config.parallel.timeout_s);
  world.store = rendezvous(world.env, rendezvous_s);
  if (world.env.distributed()) log::info(world.env.describe());  // how this run was started, for its log
  check_same_config(world.store, world.env, config.resolved, rendezvous_s);
  world.comm = make_communicator(backend, device, world.env, world.store, config.parallel.timeout_s);
  return world;
}

}  // namespace ft::comm
