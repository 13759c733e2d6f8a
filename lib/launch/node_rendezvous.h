// The launchers of a multi-node run with --max-restarts meet before every start of their ranks,
// so that a node whose ranks failed (its link went down, its machine rebooted) rejoins the others
// and all ranks start again together, from the latest checkpoint. As with torchrun's c10d
// rendezvous: node 0's launcher hosts the meeting at --master_addr:--master_port and picks a
// fresh MASTER_PORT for the ranks of each start, so no rank of a start can reach the store of the
// one before.
//
// The protocol, one line each way over TCP, a fresh connection per meeting:
//   node i > 0:  "join node_rank=I nnodes=K nproc_per_node=N\n"
//   node 0:      "go restart=R port=P\n"   once all K-1 other nodes have joined
//                "error MESSAGE\n"          when node i's command line does not fit node 0's
// R is node 0's start number: every node's ranks get it as FT_RESTART_COUNT. A node that joins
// while the others run waits (its connection in node 0's backlog) until they meet again. No
// authentication, like c10d's store: docs/security.md says what to firewall.
#pragma once

#include <string>

#include "launch/launch_options.h"
#include "util/error.h"

namespace ft::launch {

// What a meeting came to.
struct Meeting {
  int restart = 0;  // the start number for FT_RESTART_COUNT (node 0's)
  int port = 0;     // MASTER_PORT of this start's ranks
  int signo = 0;    // != 0: ft_launch got this signal while waiting; nothing starts
};

// The other nodes did not come within --join-timeout, or one of them does not fit this run.
class RendezvousError : public Error {
 public:
  explicit RendezvousError(const std::string& message) : Error(message) {}
};

class NodeRendezvous {
 public:
  // Node 0 listens from here on (on the address --master_addr resolves to); the others connect
  // at each meet(). Throws RendezvousError when node 0 cannot listen there.
  explicit NodeRendezvous(const Options& o);
  ~NodeRendezvous();
  NodeRendezvous(const NodeRendezvous&) = delete;
  NodeRendezvous& operator=(const NodeRendezvous&) = delete;

  // Waits until every node's launcher has come (node 0: `restart` is its start number, sent to
  // the others) or a signal arrives on `signal_fd` (a pipe of signal numbers, one byte each;
  // SIGCHLD bytes are skipped). Throws RendezvousError after --join-timeout.
  Meeting meet(int restart, int signal_fd);

  // "10.0.0.1:29500": where node 0's launcher is met.
  std::string endpoint() const;

 private:
  Meeting host(int restart, int signal_fd);
  Meeting join(int signal_fd);

  Options options_;
  int listen_fd_ = -1;  // node 0 only
};

// The line node i sends, and node 0's reading of one: throws RendezvousError naming what does
// not fit node 0's `o` (another --nnodes or --nproc_per_node, a node rank out of range).
std::string join_line(const Options& o);
int node_of_join_line(const std::string& line, const Options& o);

}  // namespace ft::launch
