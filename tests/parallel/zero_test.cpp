// ZeRO pieces in one process: the sharded layout (padding, chunks, decay segments per shard),
// ZeRO-2's reduce-scatter buckets against a fake two-rank world (no full gradient left behind,
// buckets launched during backward, staging memory bounded), and on one rank ZeRO-1/2, with and
// without optimizer offload, step for step equal to DDP.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "parallel/ddp_strategy.h"
#include "parallel/flat_parameters.h"
#include "parallel/optimizer_shard.h"
#include "parallel/reduce_scatter_buckets.h"
#include "parallel/shard_layout.h"
#include "parallel/zero_strategy.h"
#include "test_support.h"

namespace ft::parallel {
namespace {

TEST(ShardLayout, BucketsArePaddedToEqualChunksPerRank) {
  // Buckets of >= 8 elements from the end: {slot 3 (2), slot 2 (7)}, then {slot 1 (3), slot 0 (5)}.
  // In flat order: [0 1 | pad 1] [2 3 | pad 0]: lengths 8 and 9 -> chunks 3 and 3 on 3 ranks.
  ShardLayout layout({5, 3, 7, 2}, /*world=*/3, /*rank=*/1, /*bucket_elements=*/8);
  ASSERT_EQ(layout.buckets().size(), 2u);
  EXPECT_EQ(layout.slot_offsets(), (std::vector<std::int64_t>{0, 5, 9, 16}));
  EXPECT_EQ(layout.numel(), 18);
  EXPECT_EQ(layout.shard_numel(), 6);
  const auto& a = layout.buckets()[0];
  const auto& b = layout.buckets()[1];
  EXPECT_EQ(a.slots, (std::vector<std::size_t>{0, 1}));
  EXPECT_EQ(b.slots, (std::vector<std::size_t>{2, 3}));
  EXPECT_EQ(a.chunk, 3);
  EXPECT_EQ(b.begin, 9);
  EXPECT_EQ(b.shard_offset, 3);
  EXPECT_EQ(layout.chunk_begin(a), 3);
  EXPECT_EQ(layout.chunk_begin(b), 12);
}

TEST(ShardLayout, ShardSegmentsFollowTheFlatBufferElementByElement) {
  const std::vector<std::int64_t> numels{64, 10, 33, 1, 100, 7};
  for (int world : {1, 2, 3, 4}) {
    std::vector<optim::DecaySegment> flat;
    ShardLayout l0(numels, world, 0, 40);
    std::int64_t end = 0;
    for (std::size_t i = 0; i < numels.size(); ++i) {
      if (l0.slot_offsets()[i] > end) flat.push_back({end, l0.slot_offsets()[i] - end, false});
      flat.push_back({l0.slot_offsets()[i], numels[i], i % 2 == 0});
      end = l0.slot_offsets()[i] + numels[i];
    }
    if (end < l0.numel()) flat.push_back({end, l0.numel() - end, false});
    std::vector<int> flag(l0.numel());
    for (const auto& s : flat)
      for (std::int64_t i = s.offset; i < s.offset + s.length; ++i) flag[i] = s.decay;
    std::vector<int> owners(l0.numel(), 0);
    for (int rank = 0; rank < world; ++rank) {
      ShardLayout layout(numels, world, rank, 40);
      const auto segments = layout.shard_segments(flat);
      optim::check_segments(segments, layout.shard_numel());
      std::vector<int> shard_flag(layout.shard_numel());
      for (const auto& s : segments)
        for (std::int64_t i = s.offset; i < s.offset + s.length; ++i) shard_flag[i] = s.decay;
      for (const auto& b : layout.buckets()) {
        EXPECT_EQ(layout.region_numel(b) % world, 0);
        for (std::int64_t i = 0; i < b.chunk; ++i) {
          EXPECT_EQ(shard_flag[b.shard_offset + i], flag[layout.chunk_begin(b) + i]) << world << " " << rank;
          ++owners[layout.chunk_begin(b) + i];
        }
      }
    }
    for (int o : owners) EXPECT_EQ(o, 1) << "every element has exactly one owner (world " << world << ")";
  }
}

// Two ranks in one process: the peer holds the same gradients, so reduce_scatter returns twice
// this rank's chunk. Records the calls.
class FakeTwoRanks : public comm::Communicator {
 public:
  struct Done : comm::Work {
    void wait() override {}
  };
  explicit FakeTwoRanks(int rank) : rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return 2; }
  std::string backend() const override { return "fake"; }
  c10::Device device() const override { return c10::kCPU; }
  std::shared_ptr<comm::Work> all_reduce(at::Tensor& t, comm::ReduceOp) override {
    t.mul_(2);
    return std::make_shared<Done>();
  }
  std::shared_ptr<comm::Work> reduce_scatter(at::Tensor& out, const at::Tensor& in, comm::ReduceOp) override {
    out.copy_(in.view({2, -1})[rank_] * 2);
    calls.push_back(in.numel());
    return std::make_shared<Done>();
  }
  std::shared_ptr<comm::Work> all_gather(at::Tensor&, const at::Tensor&) override { return nullptr; }
  std::shared_ptr<comm::Work> broadcast(at::Tensor&, int) override { return std::make_shared<Done>(); }
  void barrier() override {}
  std::vector<std::int64_t> calls;

 private:
  int rank_;
};

struct ShardedNet {
  explicit ShardedNet(std::uint64_t seed = 1) {
    torch::manual_seed(seed);
    w1 = (torch::randn({64, 32}) * 0.1).set_requires_grad(true);
    w2 = (torch::randn({32, 64}) * 0.1).set_requires_grad(true);
    w3 = (torch::randn({64}) + 1).set_requires_grad(true);
  }
  at::Tensor w1, w2, w3;
  NamedParameters named() { return {{"w1", w1}, {"w2", w2}, {"w3", w3}}; }
  at::Tensor loss(int batch = 0) {
    auto x = torch::sin(torch::arange(4 * 32, torch::kFloat).view({4, 32}) + batch).to(w1.scalar_type());
    return (x.matmul(w1.t()).tanh().matmul(w2.t()).tanh().matmul(w1.t()) * w3).pow(2).sum();
  }
};

TEST(ReduceScatterBuckets, KeepOnlyTheShardAndLaunchDuringBackward) {
  for (int rank : {0, 1}) {
    ShardedNet net, ref;
    FakeTwoRanks comm(rank);
    auto named = net.named();
    // Buckets of >= 64 elements: w3, w2, w1 each alone.
    ShardLayout layout({net.w1.numel(), net.w2.numel(), net.w3.numel()}, 2, rank, 64);
    FlatParameters flat(named, layout.slot_offsets(), layout.numel(), /*with_grads=*/false);
    at::Tensor shard = torch::zeros({layout.shard_numel()});
    ReduceScatterBuckets buckets(layout, {net.w1, net.w2, net.w3}, comm, shard, torch::kFloat, /*overlap=*/true);
    ASSERT_EQ(layout.buckets().size(), 3u);
    for (int micro = 0; micro < 2; ++micro) {
      buckets.begin_backward();
      net.loss(micro).backward();
      EXPECT_EQ(buckets.launched_during_backward(), 3u);
      for (const auto& p : {net.w1, net.w2, net.w3}) EXPECT_FALSE(p.grad().defined()) << "a full gradient was kept";
    }
    buckets.finish();
    EXPECT_EQ(comm.calls.size(), 6u);
    // Reference: the full gradients of both micro-batches, laid out flat, doubled; this rank's chunks.
    ref.loss(0).backward();
    ref.loss(1).backward();
    at::Tensor full = torch::zeros({layout.numel()});
    const std::vector<at::Tensor> grads{ref.w1.grad(), ref.w2.grad(), ref.w3.grad()};
    for (std::size_t i = 0; i < grads.size(); ++i)
      full.narrow(0, layout.slot_offsets()[i], grads[i].numel()).copy_(grads[i].flatten() * 2);
    for (const auto& b : layout.buckets()) {
      EXPECT_TRUE(torch::allclose(shard.narrow(0, b.shard_offset, b.chunk), full.narrow(0, layout.chunk_begin(b), b.chunk),
                                  1e-6, 1e-6));
    }
    // Staging: at most kMaxInFlight + 1 buckets alive at once (the largest is w1's 2048 elements).
    EXPECT_LE(buckets.peak_staging_bytes(), 3 * (2048 + 1024) * 4);
  }
}

// One rank: every strategy must take the same steps. ZeRO-2 adds each micro-batch into its shard
// in the order autograd would have accumulated, so even with accumulation the results are bitwise.
std::vector<at::Tensor> train_zero(const std::string& strategy, bool offload, c10::ScalarType dtype = torch::kFloat) {
  ShardedNet net;
  auto comm = comm::make_single_process_communicator();
  StrategyOptions options;
  options.adamw.weight_decay = 0.1;
  options.bucket_mb = 1.0 / 1024;
  options.offload_optimizer = offload;
  std::unique_ptr<ParallelStrategy> s;
  if (strategy == "ddp") s = std::make_unique<DdpStrategy>(*comm, options);
  if (strategy == "zero1") s = std::make_unique<ZeroStrategy>(1, *comm, options);
  if (strategy == "zero2") s = std::make_unique<ZeroStrategy>(2, *comm, options);
  if (dtype != torch::kFloat) {
    torch::NoGradGuard no_grad;
    for (at::Tensor* p : {&net.w1, &net.w2, &net.w3}) *p = p->to(dtype).set_requires_grad(true);
  }
  s->setup(net.named(), {});  // DDP and ZeRO keep one unit: no layers needed
  for (int step = 0; step < 4; ++step) {
    for (int micro = 0; micro < 2; ++micro) {
      s->before_backward(micro == 1);
      net.loss(step * 2 + micro).backward();
    }
    s->finish_gradients();
    const double norm = std::sqrt(s->grad_sum_of_squares());
    s->step(1e-2, std::min(1.0, 5.0 / (norm + 1e-6)));
  }
  std::vector<at::Tensor> out;
  s->for_each_full_parameter([&](const std::string&, const at::Tensor& t) { out.push_back(t.clone()); });
  return out;
}

TEST(ZeroStrategy, OneRankEqualsDdpBitwiseWithAndWithoutOffload) {
  const auto ddp = train_zero("ddp", false);
  for (const char* strategy : {"ddp", "zero1", "zero2"}) {
    for (bool offload : {false, true}) {
      SCOPED_TRACE(std::string(strategy) + (offload ? " offload" : ""));
      const auto got = train_zero(strategy, offload);
      ASSERT_EQ(got.size(), ddp.size());
      for (std::size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(torch::equal(got[i], ddp[i])) << i;
    }
  }
}

TEST(ZeroStrategy, Bf16ParametersWithFp32MasterShard) {
  const auto ddp = train_zero("ddp", false, torch::kBFloat16);
  for (const char* strategy : {"zero1", "zero2"}) {
    const auto got = train_zero(strategy, true, torch::kBFloat16);
    ASSERT_EQ(got.size(), ddp.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].scalar_type(), torch::kBFloat16);
      // bf16 gradients: ZeRO-2 rounds each micro-batch's sum to bf16 (as the shard holds it) where
      // DDP's autograd accumulates in bf16 too, in the same order: equal up to rare ties.
      EXPECT_LT((got[i].to(torch::kFloat) - ddp[i].to(torch::kFloat)).abs().max().item<double>(), 2e-2) << strategy;
    }
  }
}

TEST(OptimizerShard, CopiesInChunksThroughASmallBuffer) {
  // What offload does between a GPU and the host: bf16 through a bf16 buffer, converted on the host.
  const at::Tensor master = torch::randn({1000});
  at::Tensor device = torch::empty({1000}, torch::kBFloat16);
  copy_in_chunks(device, master, torch::empty({64}, torch::kBFloat16));
  EXPECT_TRUE(torch::equal(device, master.to(torch::kBFloat16)));
  at::Tensor back = torch::empty({1000});
  copy_in_chunks(back, device, torch::empty({333}, torch::kBFloat16));
  EXPECT_TRUE(torch::equal(back, device.to(torch::kFloat)));
}

TEST(ZeroStrategy, MemoryReportCountsTheShards) {
  ShardedNet net;
  auto comm = comm::make_single_process_communicator();
  StrategyOptions options;
  options.offload_optimizer = true;
  ZeroStrategy s(2, *comm, options);
  s.setup(net.named(), {});
  const std::int64_t psi = 64 * 32 + 32 * 64 + 64;
  const MemoryReport m = s.memory();
  EXPECT_EQ(m.parameters, psi * 4);
  EXPECT_EQ(m.gradients, psi * 4);
  EXPECT_EQ(m.optimizer, 0);
  EXPECT_EQ(m.host_optimizer, psi * 12);
  EXPECT_EQ(m.host_gradients, psi * 4);
}

}  // namespace
}  // namespace ft::parallel
