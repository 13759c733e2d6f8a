// The rank environment of one process: who am I (rank, local rank), how many are we, and where
// do we meet (MASTER_ADDR:MASTER_PORT). Read from torchrun's variables (ft_launch sets the same),
// else from Slurm's (srun), else a world of one. Inconsistent values are errors naming the
// variable and its value; nothing here talks to the network (that is rendezvous.h).
#pragma once

#include <map>
#include <string>

namespace ft::comm {

using EnvMap = std::map<std::string, std::string>;

struct RankEnv {
  int rank = 0;              // 0 .. world_size-1
  int local_rank = 0;        // 0 .. local_world_size-1: the GPU index on this node
  int world_size = 1;
  int local_world_size = 1;  // processes on this node
  std::string master_addr = "127.0.0.1";  // where rank 0 hosts the rendezvous store
  int master_port = 0;       // 0 = not set (only allowed in a world of one)
  std::string source = "default";  // "torchrun" (RANK, WORLD_SIZE, ...), "slurm" or "default"
  // torchrun's elastic agent already hosts a TCP store at MASTER_ADDR:MASTER_PORT and says so with
  // TORCHELASTIC_USE_AGENT_STORE=True: every rank, rank 0 included, connects to it as a client.
  bool agent_store = false;
  // Which start of the workers this is (TORCHELASTIC_RESTART_COUNT, set by torchrun and
  // ft_launch): 0 first, then 1, 2, ... after each restart.
  int restart_count = 0;

  // Every key this process writes to the store lives under this prefix. torchrun's agent keeps
  // one store for all restarts, so each start gets its own keys, as torch 1.13's workers did:
  // "/worker/attempt_N/". A store hosted by rank 0 is new at each start and needs none.
  std::string store_prefix() const;

  bool distributed() const { return world_size > 1; }
  // "rank 1 of 4 (local rank 1 of 4), rendezvous at 127.0.0.1:29500 (torchrun variables)"
  std::string describe() const;
};

// From torchrun's RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
// TORCHELASTIC_USE_AGENT_STORE ("True" or "False") and TORCHELASTIC_RESTART_COUNT.
// Without RANK, from Slurm's SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS, SLURM_NTASKS_PER_NODE
// (else SLURM_TASKS_PER_NODE at SLURM_NODEID, else SLURM_NTASKS / SLURM_NNODES), the first host of
// SLURM_JOB_NODELIST / SLURM_NODELIST (MASTER_ADDR wins when set) and MASTER_PORT (else
// 15000 + SLURM_JOB_ID % 20000, the same on every task of the job). Nothing set: rank 0 of 1.
// Throws ft::Error naming the variable and value: non-numeric or negative values, RANK >=
// WORLD_SIZE, LOCAL_RANK >= LOCAL_WORLD_SIZE, WORLD_SIZE > 1 without MASTER_PORT, an agent store
// announced without MASTER_ADDR and MASTER_PORT, ...
RankEnv read_rank_env(const EnvMap& env);
RankEnv read_rank_env();  // the process environment

EnvMap process_environment();

// The first host of a Slurm node list: "node[01-04,07],gpu5" -> "node01"; "a,b" -> "a".
std::string first_slurm_host(const std::string& nodelist);

// Seconds the rendezvous waits: FT_RENDEZVOUS_TIMEOUT when set (a number > 0, else ft::Error),
// otherwise `config_timeout_s` (parallel.timeout_s).
double rendezvous_timeout_s(double config_timeout_s, const EnvMap& env);
double rendezvous_timeout_s(double config_timeout_s);

}  // namespace ft::comm
