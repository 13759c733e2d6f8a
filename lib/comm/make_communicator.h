// Choosing and building the Communicator for a run: NCCL for CUDA devices, Gloo otherwise, the
// single-process one for a world of one; and join_world(), the whole start-up a distributed
// program does (rank environment, rendezvous, same-config check, communicator). Light header:
// neither c10d nor NCCL comes in with it.
#pragma once

#include <c10/core/Device.h>

#include <memory>
#include <string>

#include "config/run_config.h"
#include "comm/communicator.h"
#include "comm/rank_env.h"
#include "comm/store.h"

namespace ft::comm {

// backend: "auto" (NCCL when `device` is CUDA, else Gloo), "gloo" or "nccl" (parallel.backend).
// A world of one gets the single-process communicator for "auto" and "gloo", and a real NCCL
// communicator for "nccl" (see nccl_communicator.h). store: from rendezvous() (null in a world of
// one). timeout_s bounds every collective.
std::unique_ptr<Communicator> make_communicator(const std::string& backend, const c10::Device& device,
                                                const RankEnv& env, std::shared_ptr<Store> store, double timeout_s);

// The backend's name ("nccl" or "gloo") when it can run on `device` in this build, else an
// ft::Error that names the build (its LibTorch, whether it has CUDA and NCCL) and the fix: the
// same on 1 and 8 ranks, before any rank waits for another.
std::string check_backend(const std::string& backend, const c10::Device& device);

// Whether this build has the NCCL communicator (CMake option FT_WITH_NCCL).
bool nccl_compiled();

// A joined world: this rank's environment, the store (null in a world of one) and the
// communicator. Destruction order matters and is the members' reverse order: the communicator
// first, then the store it uses.
struct World {
  RankEnv env;
  std::shared_ptr<Store> store;
  std::unique_ptr<Communicator> comm;
};

// read_rank_env(), log::set_rank, rendezvous (timeout: FT_RENDEZVOUS_TIMEOUT, else
// parallel.timeout_s), check_same_config(config.resolved), make_communicator(parallel.backend,
// device, ..., parallel.timeout_s).
World join_world(const config::RunConfig& config, const c10::Device& device);

}  // namespace ft::comm
