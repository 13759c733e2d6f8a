// The program tests/comm/multirank_test.cpp starts through ft_launch: one scenario per run, each
// rank checking its own results against closed forms and printing "rank R: ..." lines the test
// reads. Failures are ft::Errors printed by run_main, so the test sees the real messages.
//   comm_worker SCENARIO [--timeout S] [--victim R] [--marker TEXT]
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <torch/torch.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <string>
#include <thread>
#include <utility>

#include "app_main.h"
#include "comm/make_communicator.h"
#include "comm/process_exit.h"
#include "comm/rendezvous.h"
#include "util/error.h"
#include "util/log.h"

namespace {

using ft::comm::Communicator;
using ft::comm::ReduceOp;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string scenario;
  double timeout_s = 10;
  int victim = 1;
  std::string op = "all_reduce";  // the collective a fault interrupts: all_reduce or all_gather
};

Args parse(int argc, char** argv) {
  Args a;
  if (argc < 2) throw ft::app::UsageError{"usage: comm_worker SCENARIO [--timeout S] [--victim R] [--op all_reduce|all_gather] [--marker TEXT]"};
  a.scenario = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--timeout") a.timeout_s = std::atof(argv[i + 1]);
    else if (flag == "--victim") a.victim = std::atoi(argv[i + 1]);
    else if (flag == "--op") a.op = argv[i + 1];
    else if (flag != "--marker") throw ft::app::UsageError{"unknown option " + flag};
  }
  if (a.op != "all_reduce" && a.op != "all_gather") throw ft::app::UsageError{"--op: all_reduce or all_gather, got " + a.op};
  return a;
}

void say(int rank, const std::string& text) {
  std::printf("rank %d: %s\n", rank, text.c_str());
  std::fflush(stdout);
}

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void expect_equal(const torch::Tensor& got, const torch::Tensor& expected, const std::string& what) {
  const auto g = got.cpu().to(torch::kDouble);
  const auto e = expected.cpu().to(torch::kDouble);
  FT_CHECK(g.sizes() == e.sizes() && torch::allclose(g, e, 1e-6, 1e-6), what, ": got ", g.flatten().slice(0, 0, 8),
           " expected ", e.flatten().slice(0, 0, 8));
}

// Every tensor handed to the communicator lives on this device (CPU for Gloo, cuda:LOCAL_RANK for NCCL).
torch::Device g_device = torch::kCPU;
torch::Tensor on_device(const torch::Tensor& t) { return t.to(g_device); }
torch::Tensor arange(std::int64_t n, torch::Dtype dtype) { return on_device(torch::arange(n, torch::kDouble).to(dtype)); }
torch::Tensor full(std::int64_t n, double value, torch::Dtype dtype = torch::kFloat) {
  return on_device(torch::full({n}, value, torch::TensorOptions().dtype(dtype)));
}

// Rank-filled tensors against closed forms: sum of r over ranks = W(W-1)/2, max = W-1, etc.
void check_collectives(Communicator& comm) {
  const int W = comm.world_size();
  const int r = comm.rank();
  const double tri = W * (W - 1) / 2.0;
  for (auto dtype : {torch::kFloat, torch::kDouble, torch::kLong}) {
    for (std::int64_t n : {1, 7, 1001}) {
      const std::string tag = ft::str(torch::toString(dtype), " n=", n);
      auto base = arange(n, torch::kDouble);

      auto t = arange(n, dtype) + r;
      comm.all_reduce(t, ReduceOp::kSum)->wait();
      expect_equal(t, base * W + tri, "all_reduce sum " + tag);

      t = arange(n, dtype) * (r + 1);
      comm.all_reduce(t, ReduceOp::kMax)->wait();
      expect_equal(t, base * W, "all_reduce max " + tag);

      if (dtype != torch::kLong) {
        t = arange(n, dtype) + r;
        comm.all_reduce(t, ReduceOp::kAvg)->wait();
        expect_equal(t, base + (W - 1) / 2.0, "all_reduce avg " + tag);
      }

      // Chunk j of rank r's input holds j*n + i + 1000 r; rank `r` receives chunk r summed.
      auto input = arange(W * n, dtype) + 1000 * r;
      auto out = full(n, -1, dtype);
      auto mine = base + r * n;
      comm.reduce_scatter(out, input, ReduceOp::kSum)->wait();
      expect_equal(out, mine * W + 1000 * tri, "reduce_scatter sum " + tag);
      input = arange(W * n, dtype) * (r + 1);
      comm.reduce_scatter(out, input, ReduceOp::kMax)->wait();
      expect_equal(out, mine * W, "reduce_scatter max " + tag);
      if (dtype != torch::kLong) {
        input = arange(W * n, dtype) + 1000 * r;
        comm.reduce_scatter(out, input, ReduceOp::kAvg)->wait();
        expect_equal(out, mine + 1000 * tri / W, "reduce_scatter avg " + tag);
      }

      auto gathered = full(W * n, -1, dtype).view({W, n});
      auto piece = arange(n, dtype) + 100 * r;
      comm.all_gather(gathered, piece)->wait();
      for (int q = 0; q < W; ++q) expect_equal(gathered[q], base + 100 * q, ft::str("all_gather chunk ", q, " ", tag));

      const int root = W - 1;
      t = r == root ? arange(n, dtype) + 42 : full(n, 0, dtype);
      comm.broadcast(t, root)->wait();
      expect_equal(t, base + 42, "broadcast " + tag);
    }
  }
  // Half precisions: small integers, exact in both.
  for (auto dtype : {torch::kBFloat16, torch::kHalf}) {
    const std::string tag = torch::toString(dtype);
    auto t = full(5, r + 1, dtype);
    comm.all_reduce(t, ReduceOp::kSum)->wait();
    expect_equal(t, torch::full({5}, W * (W + 1) / 2.0), "all_reduce sum " + tag);
    t = full(5, r + 1, dtype);
    comm.all_reduce(t, ReduceOp::kAvg)->wait();
    expect_equal(t, torch::full({5}, (W + 1) / 2.0), "all_reduce avg " + tag);
    auto input = on_device((torch::arange(W * 3, torch::kDouble).floor_divide(3) + r).to(dtype));  // chunk j = j + r
    auto out = full(3, 0, dtype);
    comm.reduce_scatter(out, input, ReduceOp::kSum)->wait();
    expect_equal(out, torch::full({3}, W * r + tri), "reduce_scatter sum " + tag);
    auto gathered = full(W * 3, 0, dtype);
    comm.all_gather(gathered, full(3, r + 0.5, dtype))->wait();
    expect_equal(gathered, torch::arange(W, torch::kDouble).repeat_interleave(3) + 0.5, "all_gather " + tag);
    t = r == 0 ? full(4, 2.5, dtype) : full(4, 0, dtype);
    comm.broadcast(t, 0)->wait();
    expect_equal(t, torch::full({4}, 2.5), "broadcast " + tag);
  }
  auto flags = on_device(torch::arange(6).remainder(W).eq(r));
  comm.all_reduce(flags, ReduceOp::kMax)->wait();
  FT_CHECK(flags.all().item<bool>(), "all_reduce max bool: ", flags);
  auto empty = full(0, 0);
  comm.all_reduce(empty, ReduceOp::kSum)->wait();

  // Checks that stop before any communication, with their messages.
  auto wrong_out = full(3, 0);
  try {
    comm.reduce_scatter(wrong_out, full(3 * W + 1, 0), ReduceOp::kSum);
    throw ft::Error("reduce_scatter with mismatched sizes did not throw");
  } catch (const ft::Error& e) {
    FT_CHECK(std::string(e.what()).find(ft::str("expected world_size (", W, ") x output's 3 = ", 3 * W)) != std::string::npos,
             "unexpected message: ", e.what());
  }
  say(r, "collectives ok");
}

// Several handles in flight at once, waited in reverse order.
void check_overlap(Communicator& comm) {
  const int W = comm.world_size();
  const int r = comm.rank();
  std::vector<torch::Tensor> sums;
  std::vector<std::shared_ptr<ft::comm::Work>> works;
  for (int k = 0; k < 4; ++k) {
    sums.push_back(full(4096 + k, r + k));
    works.push_back(comm.all_reduce(sums.back(), ReduceOp::kSum));
  }
  auto rs_out = full(513, 0);
  auto rs_in = full(513 * W, r + 1);
  works.push_back(comm.reduce_scatter(rs_out, rs_in, ReduceOp::kSum));
  auto ag_out = full(W * 17, 0);
  auto ag_in = full(17, r);
  works.push_back(comm.all_gather(ag_out, ag_in));
  auto bc = full(100, r == 0 ? 7.0 : 0.0);
  works.push_back(comm.broadcast(bc, 0));
  for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();
  const double tri = W * (W - 1) / 2.0;
  for (int k = 0; k < 4; ++k) expect_equal(sums[k], torch::full({4096 + k}, tri + W * k), ft::str("overlapped all_reduce ", k));
  expect_equal(rs_out, torch::full({513}, W * (W + 1) / 2.0), "overlapped reduce_scatter");
  expect_equal(ag_out, torch::arange(W, torch::kDouble).repeat_interleave(17), "overlapped all_gather");
  expect_equal(bc, torch::full({100}, 7.0), "overlapped broadcast");
  say(r, "overlap ok");
}

void check_barrier(Communicator& comm) {
  comm.barrier();
  const auto t0 = Clock::now();
  if (comm.rank() == comm.world_size() - 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  comm.barrier();
  const double waited = since(t0);
  FT_CHECK(waited > 0.25, "barrier returned after ", waited, " s although rank ", comm.world_size() - 1, " slept 0.3 s");
  say(comm.rank(), "barrier ok");
}

// Bytes this process has sent over TCP (all its sockets), from TCP_INFO, and how many of them
// were resends. The check counts payload only: under memory pressure (CI runs two sanitized
// multirank suites at once) even loopback drops segments, and a resend says nothing about how much
// the collective had to send.
struct TcpSent {
  std::uint64_t bytes = 0;
  std::uint64_t retransmitted = 0;
  std::uint64_t payload() const { return bytes - retransmitted; }
};

TcpSent tcp_sent() {
  TcpSent total;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    const int fd = std::atoi(entry.path().filename().c_str());
    tcp_info info{};
    socklen_t len = sizeof(info);
    if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 && len >= offsetof(tcp_info, tcpi_bytes_retrans) + 8) {
      total.bytes += info.tcpi_bytes_sent;
      total.retransmitted += info.tcpi_bytes_retrans;
    }
  }
  return total;
}

void check_bytes(Communicator& comm) {
  const int W = comm.world_size();
  const std::int64_t n = 1 << 20;  // 4 MiB of float32
  const double buffer = n * 4.0;
  auto input = torch::ones({n});
  auto out = torch::zeros({n / W});
  // What this rank sent for one collective, in buffers: payload and resends.
  auto sent_by = [&](const std::function<void()>& collective) {
    comm.barrier();
    const TcpSent before = tcp_sent();
    collective();
    comm.barrier();
    const TcpSent after = tcp_sent();
    return std::pair<double, double>{(after.payload() - before.payload()) / buffer,
                                     (after.retransmitted - before.retransmitted) / buffer};
  };
  const auto [rs, resent] = sent_by([&] { comm.reduce_scatter(out, input, ReduceOp::kSum)->wait(); });
  const double ar = sent_by([&] { comm.all_reduce(input, ReduceOp::kSum)->wait(); }).first;
  const double ag = sent_by([&] { comm.all_gather(input, out)->wait(); }).first;
  const double expected = (W - 1.0) / W;
  say(comm.rank(), ft::str("reduce_scatter sent ", rs, " of the buffer (expected ", expected, ", resent ", resent,
                           " more), all_reduce ", ar, ", all_gather ", ag));
  FT_CHECK(rs > expected * 0.95 && rs < expected * 1.1, "reduce_scatter sent ", rs, " x the buffer, expected about ",
           expected);
  FT_CHECK(ag > expected * 0.95 && ag < expected * 1.1, "all_gather sent ", ag, " x the output, expected about ",
           expected);
}

// A victim dies (SIGKILL) or stops (SIGSTOP) in the middle of a collective; the others must fail.
void fault(Communicator& comm, const Args& a, int signo, bool idle = false) {
  const int r = comm.rank();
  // ft_launch sends SIGTERM to everyone once the victim is gone; the survivors carry on, so the
  // test sees them detect the failure themselves (the launcher's SIGKILL comes after its grace).
  // Ignored before the warm-up: a slow survivor (under TSan) may still be finishing its last
  // warm-up all_reduce when the victim, already through it, dies.
  if (r != a.victim) std::signal(SIGTERM, SIG_IGN);
  for (int k = 0; k < 3; ++k) {
    auto t = torch::ones({1000});
    comm.all_reduce(t, ReduceOp::kSum)->wait();
  }
  auto big = torch::ones({1 << 22});
  const bool gather = a.op == "all_gather";
  auto gathered = gather ? torch::zeros({comm.world_size() << 22}) : torch::Tensor();
  auto collective = [&] { return gather ? comm.all_gather(gathered, big) : comm.all_reduce(big, ReduceOp::kSum); };
  say(r, "warm");
  if (r == a.victim && idle) {
    std::raise(signo);  // between collectives: the others find out at their next one
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return;
  }
  if (idle) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  if (r == a.victim) {
    auto work = collective();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::raise(signo);
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return;
  }
  const auto t0 = Clock::now();
  try {
    for (int k = 0; k < 10; ++k) collective()->wait();
  } catch (const ft::Error&) {
    say(r, ft::str("detected after ", since(t0), " s"));
    throw;
  }
  throw ft::Error("the collectives went through although a rank was gone");
}

void wait_for_signal(int rank) {
  static volatile std::sig_atomic_t got = 0;
  std::signal(SIGTERM, [](int) { got = 1; });
  say(rank, "ready");
  const auto t0 = Clock::now();
  while (!got && since(t0) < 20) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  FT_CHECK(got, "no SIGTERM within 20 s");
  say(rank, "got SIGTERM");
}

int run(int argc, char** argv) {
  const Args a = parse(argc, argv);
  const ft::comm::RankEnv env = ft::comm::read_rank_env();
  ft::log::set_rank(env.rank, env.world_size);
  const int r = env.rank;

  if (a.scenario == "wait_signal") {
    wait_for_signal(r);
    return 0;
  }

  auto store = ft::comm::rendezvous(env, ft::comm::rendezvous_timeout_s(a.timeout_s));
  say(r, "rendezvous ok");
  if (a.scenario == "rendezvous") return 0;

  ft::Json config = {{"run_dir", "runs/x"}, {"train", {{"lr", 0.001}, {"epochs", 1}}}};
  if (a.scenario == "config_mismatch" && r == a.victim) config["train"]["lr"] = 0.002;
  ft::comm::check_same_config(store, env, config, a.timeout_s);
  say(r, "config ok");

  // nccl_collectives: the same closed forms on cuda:LOCAL_RANK (the test skips it without GPUs).
  const bool nccl = a.scenario == "nccl_collectives";
  if (nccl) g_device = torch::Device(torch::kCUDA, env.local_rank);
  auto comm = ft::comm::make_communicator(nccl ? "nccl" : "gloo", g_device, env, store, a.timeout_s);
  if (a.scenario == "collectives" || nccl) {
    check_collectives(*comm);
    check_overlap(*comm);
    check_barrier(*comm);
    if (!nccl) check_bytes(*comm);
  } else if (a.scenario == "kill") {
    fault(*comm, a, SIGKILL);
  } else if (a.scenario == "kill_idle") {
    fault(*comm, a, SIGKILL, true);
  } else if (a.scenario == "stop") {
    fault(*comm, a, SIGSTOP);
  } else if (a.scenario != "config_mismatch") {
    throw ft::app::UsageError{"unknown scenario " + a.scenario};
  }
  say(r, "done");
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ft::comm::exit_process(ft::app::run_main("comm_worker", argc, argv, run)); }
