#include "dist/communicator.h"

#include <torch/torch.h>

#include "util/error.h"

namespace ft::dist {
namespace {

class DoneWork : public Work {
 public:
  void wait() override {}
};

class SingleProcessCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string backend() const override { return "single"; }

  std::shared_ptr<Work> all_reduce(at::Tensor&, ReduceOp) override { return std::make_shared<DoneWork>(); }
  std::shared_ptr<Work> reduce_scatter(at::Tensor& output, const at::Tensor& input, ReduceOp) override {
    FT_ASSERT(output.numel() == input.numel(), "reduce_scatter sizes in a world of one");
    output.copy_(input.view_as(output));
    return std::make_shared<DoneWork>();
  }
  std::shared_ptr<Work> all_gather(at::Tensor& output, const at::Tensor& input) override {
    FT_ASSERT(output.numel() == input.numel(), "all_gather sizes in a world of one");
    output.copy_(input.view_as(output));
    return std::make_shared<DoneWork>();
  }
  std::shared_ptr<Work> broadcast(at::Tensor&, int root) override {
    FT_ASSERT(root == 0, "broadcast root in a world of one");
    return std::make_shared<DoneWork>();
  }
  void barrier() override {}
};

}  // namespace

std::unique_ptr<Communicator> make_single_process_communicator() {
  return std::make_unique<SingleProcessCommunicator>();
}

void all_reduce(Communicator& comm, at::Tensor& tensor, ReduceOp op) { comm.all_reduce(tensor, op)->wait(); }

double all_reduce_scalar(Communicator& comm, double value, ReduceOp op) {
  auto t = torch::tensor({value}, torch::kDouble);
  comm.all_reduce(t, op)->wait();
  return t.item<double>();
}

}  // namespace ft::dist
