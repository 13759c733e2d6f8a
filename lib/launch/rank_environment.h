// The environment each rank starts with: ft_launch's own, plus torchrun's rank variables.
#pragma once

#include <string>
#include <vector>

#include "launch/launch_options.h"

namespace ft::launch {

// `inherited` ("NAME=value" entries, null-terminated: environ) with RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT=port, FT_RESTART_COUNT and
// TORCHELASTIC_RESTART_COUNT=restart set, and OMP_NUM_THREADS=1 unless it is set already.
// "NAME=value" entries sorted by name, ready for execve.
std::vector<std::string> rank_environment(const char* const* inherited, const Options& o, int local_rank, int port,
                                          int restart);

}  // namespace ft::launch
