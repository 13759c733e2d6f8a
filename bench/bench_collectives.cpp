// bench_collectives: the time and the CPU time of each collective ft's communicator runs, on a
// buffer of --mb megabytes, one rank per process. Run it under a launcher:
//   ft_launch --nproc_per_node 2 build/bin/bench_collectives            # 100 MB, Gloo
//   ft_launch --nproc_per_node 2 build/bin/bench_collectives --mb 20 --iters 50
// On CPUs the collectives share the cores with training, so their CPU time (this process's user +
// system time, all its threads: Gloo's and the kernel's TCP work included) is what they cost a step.
// all_reduce moves the whole buffer; reduce_scatter takes it and leaves 1/W; all_gather fills it
// from 1/W. The host heap is set up as ft_train sets it (util/heap_reuse.h).
#include <sys/resource.h>

#include <cxxopts.hpp>

#include <cstdio>
#include <functional>
#include <iostream>

#include <torch/torch.h>

#include "app_main.h"
#include "comm/make_communicator.h"
#include "comm/rank_env.h"
#include "comm/rendezvous.h"
#include "util/error.h"
#include "util/heap_reuse.h"
#include "util/timer.h"

namespace {

double cpu_seconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

struct Timing {
  double wall_ms = 0, cpu_ms = 0;
};

// Per operation, after one untimed run; every rank starts each measurement together.
Timing measure(ft::comm::Communicator& comm, int iters, const std::function<void()>& op) {
  op();
  comm.barrier();
  const double cpu0 = cpu_seconds();
  ft::Stopwatch watch;
  for (int i = 0; i < iters; ++i) op();
  Timing t{watch.seconds() * 1e3 / iters, (cpu_seconds() - cpu0) * 1e3 / iters};
  comm.barrier();
  return t;
}

int run(int argc, char** argv) {
  cxxopts::Options options("bench_collectives", "Time and CPU time of each collective, one rank per process.");
  options.add_options()
      ("mb", "buffer size in MB (float32)", cxxopts::value<double>()->default_value("100"))
      ("iters", "timed operations per collective", cxxopts::value<int>()->default_value("20"))
      ("timeout", "seconds any collective may take", cxxopts::value<double>()->default_value("300"))
      ("h,help", "show this help");
  auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::cout << options.help() << std::endl;
    return 0;
  }
  const int iters = args["iters"].as<int>();
  const double timeout_s = args["timeout"].as<double>();
  FT_CHECK(iters > 0, "--iters must be positive, got ", iters);
  ft::keep_freed_heap_memory(ft::StepMemory::kHost);

  const ft::comm::RankEnv env = ft::comm::read_rank_env();
  FT_CHECK(env.distributed(), "bench_collectives runs one rank per process: start it with ft_launch --nproc_per_node N "
           "(or torchrun --no-python)");
  auto store = ft::comm::rendezvous(env, ft::comm::rendezvous_timeout_s(timeout_s));
  auto comm = ft::comm::make_communicator("gloo", c10::Device(c10::kCPU), env, store, timeout_s);
  const int world = comm->world_size();
  const std::int64_t numel = static_cast<std::int64_t>(args["mb"].as<double>() * 1e6 / 4) / world * world;
  FT_CHECK(numel > 0, "--mb is too small for ", world, " ranks");

  torch::NoGradGuard no_grad;
  at::Tensor full = torch::ones({numel});
  at::Tensor part = torch::ones({numel / world});
  const Timing all_reduce = measure(*comm, iters, [&] { comm->all_reduce(full, ft::comm::ReduceOp::kSum)->wait(); });
  const Timing reduce_scatter =
      measure(*comm, iters, [&] { comm->reduce_scatter(part, full, ft::comm::ReduceOp::kSum)->wait(); });
  const Timing all_gather = measure(*comm, iters, [&] { comm->all_gather(full, part)->wait(); });
  if (comm->rank() == 0) {
    std::printf("%d ranks, gloo, %.1f MB float32 buffer, %d operations each (rank 0's times)\n", world, numel * 4 / 1e6,
                iters);
    std::printf("%-16s%12s%12s%14s\n", "collective", "ms / op", "CPU ms / op", "buffer GB/s");
    for (const auto& [name, t] : {std::pair<const char*, Timing>{"all_reduce", all_reduce},
                                  {"reduce_scatter", reduce_scatter}, {"all_gather", all_gather}}) {
      std::printf("%-16s%12.1f%12.1f%14.2f\n", name, t.wall_ms, t.cpu_ms, numel * 4 / 1e6 / t.wall_ms);
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ft::app::run_main("bench_collectives", argc, argv, run, ft::app::MatrixProducts::kNo); }
