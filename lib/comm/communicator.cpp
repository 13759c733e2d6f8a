#include "comm/communicator.h"

#include <torch/torch.h>

#include "util/error.h"

namespace ft::comm {

std::shared_ptr<Work> completed_work() {
  struct Done : Work {
    void wait() override {}
  };
  return std::make_shared<Done>();
}

namespace {

class SingleProcessCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string backend() const override { return "single"; }
  c10::Device device() const override { return c10::kCPU; }

  std::shared_ptr<Work> all_reduce(at::Tensor&, ReduceOp) override { return completed_work(); }
  std::shared_ptr<Work> reduce_scatter(at::Tensor& output, const at::Tensor& input, ReduceOp) override {
    FT_ASSERT(output.numel() == input.numel(), "reduce_scatter sizes in a world of one");
    output.copy_(input.view_as(output));
    return completed_work();
  }
  std::shared_ptr<Work> all_gather(at::Tensor& output, const at::Tensor& input) override {
    FT_ASSERT(output.numel() == input.numel(), "all_gather sizes in a world of one");
    output.copy_(input.view_as(output));
    return completed_work();
  }
  std::shared_ptr<Work> broadcast(at::Tensor&, int root) override {
    FT_ASSERT(root == 0, "broadcast root in a world of one");
    return completed_work();
  }
  void barrier() override {}
};

}  // namespace

std::unique_ptr<Communicator> make_single_process_communicator() {
  return std::make_unique<SingleProcessCommunicator>();
}

void all_reduce(Communicator& comm, at::Tensor& tensor, ReduceOp op) { comm.all_reduce(tensor, op)->wait(); }

std::vector<double> all_reduce_to_host(Communicator& comm, const at::Tensor& values, ReduceOp op) {
  FT_ASSERT(values.dim() == 1, "all_reduce_to_host takes a vector, got ", values.sizes());
  // A world of one takes tensors where they are: only the final read-back crosses to the host.
  at::Tensor staged = comm.world_size() == 1 ? values.to(torch::kDouble)
                                             : values.to(comm.device(), torch::kDouble).contiguous();
  if (staged.is_same(values)) staged = staged.clone();  // never reduce the caller's tensor in place
  comm.all_reduce(staged, op)->wait();
  staged = staged.to(torch::kCPU);
  return std::vector<double>(staged.data_ptr<double>(), staged.data_ptr<double>() + staged.numel());
}

std::vector<double> all_reduce_values(Communicator& comm, const std::vector<double>& values, ReduceOp op) {
  return all_reduce_to_host(comm, torch::tensor(values, torch::kDouble), op);
}

double all_reduce_scalar(Communicator& comm, double value, ReduceOp op) {
  return all_reduce_values(comm, {value}, op).front();
}

std::vector<std::vector<double>> gather_per_rank(Communicator& comm, const std::vector<double>& values) {
  const auto n = static_cast<std::int64_t>(values.size());
  const auto world = comm.world_size();
  std::vector<double> table(static_cast<std::size_t>(world * n), 0.0);
  std::copy(values.begin(), values.end(), table.begin() + comm.rank() * n);
  const std::vector<double> summed = all_reduce_values(comm, table, ReduceOp::kSum);
  std::vector<std::vector<double>> rows;
  for (std::int64_t r = 0; r < world; ++r) rows.emplace_back(summed.begin() + r * n, summed.begin() + (r + 1) * n);
  return rows;
}

}  // namespace ft::comm
