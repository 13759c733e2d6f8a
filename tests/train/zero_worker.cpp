// The rank program of zero_multirank_test.cpp's memory test, started by ft_launch: builds the
// configured model (LoRA or full), sets up parallel.strategy, takes two optimizer steps on random
// tokens (with the config's accumulation), and prints one JSON line with what the strategy holds
// (MemoryReport), the trainable parameter count Ψ and each step's global gradient sum of squares
// as exact bits (the test checks every rank got the same).
//   ft_launch --nproc_per_node 2 zero_worker CONFIG [--set key=value ...]
#include <cxxopts.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "app_main.h"
#include "config_args.h"
#include "data/tokenizer.h"
#include "comm/make_communicator.h"
#include "comm/process_exit.h"
#include "model/causal_lm_loss.h"
#include "optim/grad_clip.h"
#include "parallel/fsdp_strategy.h"
#include "parallel/zero_strategy.h"
#include "train/model_setup.h"
#include "util/cpu_threads.h"
#include "util/json.h"

namespace {

int run(int argc, char** argv) {
  cxxopts::Options options("zero_worker", "One rank of the strategy memory test.");
  ft::app::add_config_options(options);
  auto args = options.parse(argc, argv);
  const ft::config::RunConfig c = ft::app::load_config_from_args(args);
  ft::configure_cpu_threads(1);
  ft::comm::World world = ft::comm::join_world(c, c10::kCPU);
  ft::comm::Communicator& comm = *world.comm;
  ft::data::Tokenizer tokenizer(c.model.path);
  ft::train::TrainableModel tm = ft::train::build_trainable_model(c, tokenizer, c10::kCPU);
  std::int64_t psi = 0;
  for (auto& [name, p] : tm.trainable) psi += p.numel();
  auto strategy = ft::parallel::make_strategy(c, comm);
  strategy->setup(tm.trainable, tm.trainable_layers);

  const std::int64_t accumulation =
      ft::config::gradient_accumulation_steps(c.train.global_batch_size, c.train.micro_batch_size, comm.world_size());
  const std::int64_t vocab = tm.model->config().vocab_size, seq = c.data.max_seq_len;
  torch::manual_seed(1000 + comm.rank());
  ft::Json sums = ft::Json::array();
  for (int step = 0; step < 2; ++step) {
    for (std::int64_t m = 0; m < accumulation; ++m) {
      strategy->before_backward(m + 1 == accumulation);
      strategy->before_forward();
      const torch::Tensor ids = torch::randint(vocab, {c.train.micro_batch_size, seq}, torch::kLong);
      ft::model::ForwardOptions fo;
      fo.layer_runner = strategy->layer_runner(false);
      ft::model::LossSum loss = ft::model::causal_lm_loss(tm.model(ids, fo), ids);
      (loss.sum / static_cast<double>(loss.tokens * accumulation * comm.world_size())).backward();
    }
    strategy->finish_gradients();
    const double sum = strategy->grad_sum_of_squares();
    std::uint64_t bits = 0;
    std::memcpy(&bits, &sum, sizeof bits);
    char hex[32];
    std::snprintf(hex, sizeof hex, "%016" PRIx64, bits);
    sums.push_back(hex);
    strategy->step(c.train.lr, ft::optim::clip_coefficient(std::sqrt(sum), c.train.grad_clip));
  }
  const ft::parallel::MemoryReport m = strategy->memory();
  // ZeRO: the largest bucket region in the wire dtype (what bounds ZeRO-2's staging).
  std::int64_t max_bucket_bytes = 0;
  if (auto* zero = dynamic_cast<ft::parallel::ZeroStrategy*>(strategy.get())) {
    const auto wire = ft::parallel::strategy_options(c).grad_comm_dtype;
    for (const auto& b : zero->layout().buckets())
      max_bucket_bytes = std::max<std::int64_t>(max_bucket_bytes, zero->layout().region_numel(b) * c10::elementSize(wire));
  }
  // FSDP: the root unit plus the 2 + fsdp_prefetch largest layers, in the compute dtype (the bound
  // on what is whole: the layer in use, the one above it, the prefetched ones); every layer
  // without resharding after forward.
  std::int64_t max_gathered_bytes = 0;
  if (auto* fsdp = dynamic_cast<ft::parallel::FsdpStrategy*>(strategy.get())) {
    std::vector<std::int64_t> regions;
    for (const auto& b : fsdp->layout().buckets()) regions.push_back(fsdp->layout().region_numel(b));
    std::sort(regions.begin() + 1, regions.end(), std::greater<>());
    const std::size_t whole = c.parallel.fsdp_reshard_after_forward
                                  ? 3 + static_cast<std::size_t>(c.parallel.fsdp_prefetch)
                                  : regions.size();
    for (std::size_t i = 0; i < std::min(whole, regions.size()); ++i) max_gathered_bytes += regions[i];
    max_gathered_bytes *= c10::elementSize(ft::train::compute_dtype(c));
  }
  const ft::Json line = {{"rank", comm.rank()},
                         {"world", comm.world_size()},
                         {"strategy", strategy->name()},
                         {"psi", psi},
                         {"parameters", m.parameters},
                         {"gradients", m.gradients},
                         {"optimizer", m.optimizer},
                         {"host_optimizer", m.host_optimizer},
                         {"host_gradients", m.host_gradients},
                         {"grad_staging", m.grad_staging},
                         {"gathered", m.gathered},
                         {"max_gathered_bytes", max_gathered_bytes},
                         {"max_bucket_bytes", max_bucket_bytes},
                         {"grad_sum_of_squares", sums}};
  std::printf("MEMORY %s\n", line.dump().c_str());
  std::fflush(stdout);
  comm.barrier();
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ft::comm::exit_process(ft::app::run_main("zero_worker", argc, argv, run)); }
