// The launchers' meeting before each start of a multi-node run with --max-restarts, over real
// TCP on this host's loopback: every node gets node 0's start number and the ranks' port; a node
// that does not fit is refused with the reason on both sides; a launcher that gave up is not
// counted; a missing node 0 or a missing node is an error naming the address or the node; a
// signal ends the wait.
#include "launch/node_rendezvous.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <future>
#include <string>
#include <thread>

#include "launch/free_port.h"

namespace ft::launch {
namespace {

Options node(int node_rank, int nnodes, int port, double join_timeout_s = 30, int nproc_per_node = 2) {
  Options o;
  o.nnodes = nnodes;
  o.node_rank = node_rank;
  o.nproc_per_node = nproc_per_node;
  o.master_addr = "127.0.0.1";
  o.master_port = port;
  o.join_timeout_s = join_timeout_s;
  o.command = {"true"};
  return o;
}

// A pipe standing in for ft_launch's signal pipe; nothing is written to it unless a test does.
struct SignalPipe {
  int fds[2] = {-1, -1};
  SignalPipe() { EXPECT_EQ(::pipe(fds), 0); }
  ~SignalPipe() {
    ::close(fds[0]);
    ::close(fds[1]);
  }
  void send(int signo) {
    const unsigned char byte = static_cast<unsigned char>(signo);
    EXPECT_EQ(::write(fds[1], &byte, 1), 1);
  }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const RendezvousError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(NodeRendezvous, EveryNodeGetsNodeZerosStartAndTheRanksPort) {
  const int port = free_port();
  NodeRendezvous host(node(0, 3, port));
  auto joining = [port](int rank) {
    return std::async(std::launch::async, [port, rank] {
      SignalPipe pipe;
      return NodeRendezvous(node(rank, 3, port)).meet(0, pipe.fds[0]);
    });
  };
  auto one = joining(1), two = joining(2);
  SignalPipe pipe;
  const Meeting met = host.meet(4, pipe.fds[0]);
  EXPECT_EQ(met.restart, 4);
  EXPECT_GT(met.port, 0);
  EXPECT_NE(met.port, port);
  EXPECT_EQ(met.signo, 0);
  for (auto* f : {&one, &two}) {
    const Meeting m = f->get();
    EXPECT_EQ(m.restart, 4);
    EXPECT_EQ(m.port, met.port);
    EXPECT_EQ(m.signo, 0);
  }
  // They meet again, the same way, before the next start.
  auto again = joining(1), again2 = joining(2);
  EXPECT_EQ(host.meet(5, pipe.fds[0]).restart, 5);
  EXPECT_EQ(again.get().restart, 5);
  EXPECT_EQ(again2.get().restart, 5);
}

TEST(NodeRendezvous, ANodeThatDoesNotFitIsRefusedWithTheReason) {
  const int port = free_port();
  NodeRendezvous host(node(0, 2, port, 2));
  auto odd = std::async(std::launch::async, [port] {
    SignalPipe pipe;
    return error_of([&] { NodeRendezvous(node(1, 2, port, 30, 3)).meet(0, pipe.fds[0]); });
  });
  SignalPipe pipe;
  EXPECT_EQ(error_of([&] { host.meet(0, pipe.fds[0]); }),
            str("the launchers of nodes 1 did not come to 127.0.0.1:", port, " within 2 s (--join-timeout)"));
  EXPECT_EQ(odd.get(), str("node 0's launcher at 127.0.0.1:", port,
                           " refused this node: --nproc_per_node 3 there, 2 on node 0"));
}

TEST(NodeRendezvous, JoinLinesOutOfPlace) {
  const Options o = node(0, 4, 1);
  EXPECT_EQ(join_line(node(3, 4, 1)), "join node_rank=3 nnodes=4 nproc_per_node=2\n");
  EXPECT_EQ(node_of_join_line("join node_rank=3 nnodes=4 nproc_per_node=2", o), 3);
  EXPECT_EQ(error_of([&] { node_of_join_line("join node_rank=4 nnodes=4 nproc_per_node=2", o); }),
            "--node_rank 4: expected 1..3 (0 is the node hosting this)");
  EXPECT_EQ(error_of([&] { node_of_join_line("join node_rank=0 nnodes=4 nproc_per_node=2", o); }),
            "--node_rank 0: expected 1..3 (0 is the node hosting this)");
  EXPECT_EQ(error_of([&] { node_of_join_line("join node_rank=1 nnodes=2 nproc_per_node=2", o); }),
            "--nnodes 2 there, 4 on node 0");
  EXPECT_EQ(error_of([&] { node_of_join_line("GET / HTTP/1.1", o); }), "not an ft_launch join line: \"GET / HTTP/1.1\"");
}

TEST(NodeRendezvous, ALauncherThatGaveUpIsNotCounted) {
  const int port = free_port();
  NodeRendezvous host(node(0, 3, port, 3));
  auto waiting = std::async(std::launch::async, [&] {
    SignalPipe pipe;
    return error_of([&] { host.meet(0, pipe.fds[0]); });
  });
  // Node 1 joins and leaves before the others come (its join timed out, its machine went down).
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<std::uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0);
  const std::string line = join_line(node(1, 3, port));
  ASSERT_EQ(::write(fd, line.data(), line.size()), static_cast<ssize_t>(line.size()));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ::close(fd);
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  auto two = std::async(std::launch::async, [port] {
    SignalPipe pipe;
    return error_of([&] { NodeRendezvous(node(2, 3, port, 2.5)).meet(0, pipe.fds[0]); });
  });
  EXPECT_EQ(waiting.get(), str("the launchers of nodes 1 did not come to 127.0.0.1:", port, " within 3 s (--join-timeout)"));
  EXPECT_NE(two.get().find("within 2.5 s (--join-timeout): "), std::string::npos);
}

TEST(NodeRendezvous, NoNodeZeroIsAnErrorNamingItsAddress) {
  const int port = free_port();
  SignalPipe pipe;
  EXPECT_EQ(error_of([&] { NodeRendezvous(node(1, 2, port, 1.5)).meet(0, pipe.fds[0]); }),
            str("could not join node 0's launcher at 127.0.0.1:", port,
                " within 1.5 s (--join-timeout): Connection refused"));
}

TEST(NodeRendezvous, ASignalEndsTheWaitOnEitherSide) {
  const int port = free_port();
  NodeRendezvous host(node(0, 2, port));
  SignalPipe pipe;
  pipe.send(SIGCHLD);  // a rank of the last start reaped late: not a reason to stop
  pipe.send(SIGTERM);
  const Meeting met = host.meet(0, pipe.fds[0]);
  EXPECT_EQ(met.signo, SIGTERM);
  SignalPipe other;
  other.send(SIGINT);
  EXPECT_EQ(NodeRendezvous(node(1, 2, free_port())).meet(0, other.fds[0]).signo, SIGINT);
}

}  // namespace
}  // namespace ft::launch
