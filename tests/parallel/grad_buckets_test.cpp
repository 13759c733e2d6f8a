// Gradient buckets: launched from inside backward as each bucket completes (overlap), never on
// accumulation micro-batches, and after backward when overlap is off; sums land in the flat grads.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "parallel/flat_parameters.h"
#include "parallel/grad_buckets.h"
#include "parallel/parallel_strategy.h"
#include "test_support.h"

namespace ft::parallel {
namespace {

// A world of two in one process: all_reduce doubles the tensor (as if the peer held the same
// gradients) and records when it was called.
class FakeComm : public comm::Communicator {
 public:
  struct Done : comm::Work {
    void wait() override {}
  };
  int rank() const override { return 0; }
  int world_size() const override { return 2; }
  std::string backend() const override { return "fake"; }
  c10::Device device() const override { return c10::kCPU; }
  std::shared_ptr<comm::Work> all_reduce(at::Tensor& t, comm::ReduceOp) override {
    t.mul_(2);
    calls.push_back(t.numel());
    return std::make_shared<Done>();
  }
  std::shared_ptr<comm::Work> reduce_scatter(at::Tensor&, const at::Tensor&, comm::ReduceOp) override { return nullptr; }
  std::shared_ptr<comm::Work> all_gather(at::Tensor&, const at::Tensor&) override { return nullptr; }
  std::shared_ptr<comm::Work> broadcast(at::Tensor&, int) override { return std::make_shared<Done>(); }
  void barrier() override {}
  std::vector<std::int64_t> calls;
};

struct Net {
  at::Tensor w1 = torch::full({64, 32}, 0.1).set_requires_grad(true);
  at::Tensor w2 = torch::full({32, 64}, 0.2).set_requires_grad(true);
  at::Tensor w3 = torch::full({64}, 0.3).set_requires_grad(true);
  NamedParameters named() { return {{"w1", w1}, {"w2", w2}, {"w3", w3}}; }
  at::Tensor loss() {
    auto x = torch::ones({4, 32});
    return (x.matmul(w1.t()).matmul(w2.t()).matmul(w1.t()) * w3).sum();
  }
};

TEST(GradBuckets, OverlapLaunchesEveryBucketDuringBackward) {
  Net net;
  FakeComm comm;
  auto named = net.named();
  FlatParameters flat(named);
  // 1 KiB buckets of fp32 = 256 elements: w3 (64) + part..., w2 (2048), w1 (2048).
  GradBuckets buckets(flat, {net.w1, net.w2, net.w3}, comm, 1.0 / 1024, torch::kFloat, /*overlap=*/true);
  ASSERT_GE(buckets.num_buckets(), 2u);
  buckets.arm(true);
  net.loss().backward();
  EXPECT_EQ(buckets.launched_during_backward(), buckets.num_buckets());
  EXPECT_EQ(comm.calls.size(), buckets.num_buckets());
  auto before = flat.grads().clone();
  buckets.finish();
  EXPECT_TRUE(torch::equal(flat.grads(), before));  // fp32 wire: reduced in place
  // The reduced (doubled) gradient is what the parameter sees.
  Net ref;
  ref.loss().backward();
  EXPECT_TRUE(torch::allclose(net.w1.grad(), ref.w1.grad() * 2));
}

TEST(GradBuckets, AccumulationMicroBatchesCommunicateNothing) {
  Net net;
  FakeComm comm;
  auto named = net.named();
  FlatParameters flat(named);
  GradBuckets buckets(flat, {net.w1, net.w2, net.w3}, comm, 1.0 / 1024, torch::kFloat);
  buckets.arm(false);
  net.loss().backward();
  EXPECT_EQ(buckets.finish(), 0.0);
  EXPECT_TRUE(comm.calls.empty());
  buckets.arm(true);
  net.loss().backward();
  buckets.finish();
  EXPECT_EQ(comm.calls.size(), buckets.num_buckets());
}

TEST(GradBuckets, WithoutOverlapEverythingWaitsForFinish) {
  Net net;
  FakeComm comm;
  auto named = net.named();
  FlatParameters flat(named);
  GradBuckets buckets(flat, {net.w1, net.w2, net.w3}, comm, 1.0 / 1024, torch::kBFloat16, /*overlap=*/false);
  buckets.arm(true);
  net.loss().backward();
  EXPECT_EQ(buckets.launched_during_backward(), 0u);
  EXPECT_TRUE(comm.calls.empty());
  buckets.finish();
  EXPECT_EQ(comm.calls.size(), buckets.num_buckets());
  Net ref;
  ref.loss().backward();
  // bf16 on the wire: the doubled gradient, rounded to bf16.
  EXPECT_TRUE(torch::allclose(net.w2.grad(), ref.w2.grad() * 2, 1e-2));
}

}  // namespace
}  // namespace ft::parallel
