// The collective operations the training loop and the parallel strategies use, independent of
// the backend: Gloo for CPU tensors, NCCL for CUDA tensors, or a single process. Every
// operation returns a handle to wait on, so communication can overlap computation; backends
// enforce parallel.timeout_s and name the operation and the missing rank when a peer dies.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <memory>
#include <string>
#include <vector>

namespace ft::comm {

enum class ReduceOp { kSum, kAvg, kMax };

// An operation in flight. wait() blocks until it completed on this rank (throws ft::Error on
// failure or timeout); afterwards the output tensors hold the result.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
};

// A Work that has already completed: what a collective with nothing to send returns.
std::shared_ptr<Work> completed_work();

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Ranks on this node (LOCAL_WORLD_SIZE of the rank environment): they share its CPU cores.
  virtual int local_world_size() const { return 1; }
  virtual std::string backend() const = 0;
  // Where the backend takes tensors: the CPU for Gloo, the rank's GPU for NCCL. A world of one
  // takes them anywhere and says the CPU.
  virtual c10::Device device() const = 0;

  // In place on `tensor`.
  virtual std::shared_ptr<Work> all_reduce(at::Tensor& tensor, ReduceOp op) = 0;
  // input holds world_size equal chunks (numel = world_size * output.numel()); output receives
  // the reduction of chunk `rank` over all ranks.
  virtual std::shared_ptr<Work> reduce_scatter(at::Tensor& output, const at::Tensor& input, ReduceOp op) = 0;
  // output (numel = world_size * input.numel()) receives every rank's input, in rank order.
  virtual std::shared_ptr<Work> all_gather(at::Tensor& output, const at::Tensor& input) = 0;
  virtual std::shared_ptr<Work> broadcast(at::Tensor& tensor, int root) = 0;
  virtual void barrier() = 0;

  bool is_root() const { return rank() == 0; }
};

// A world of one: collectives are identities (reduce_scatter and all_gather copy).
std::unique_ptr<Communicator> make_single_process_communicator();

// Blocking conveniences for the few numbers of a step (token counts, a loss, flags, memory
// readings): staged on the backend's device and read back once, so that they work on NCCL too.
void all_reduce(Communicator& comm, at::Tensor& tensor, ReduceOp op);
double all_reduce_scalar(Communicator& comm, double value, ReduceOp op);
std::vector<double> all_reduce_values(Communicator& comm, const std::vector<double>& values, ReduceOp op);
// `values` (any device, any floating dtype, [n]) reduced over all ranks, returned as CPU doubles:
// the one point where a step reads back what its micro-batches summed on the GPU.
std::vector<double> all_reduce_to_host(Communicator& comm, const at::Tensor& values, ReduceOp op);
// Each rank's `values` (the same count on every rank), gathered on every rank: row r is rank r's.
std::vector<std::vector<double>> gather_per_rank(Communicator& comm, const std::vector<double>& values);

}  // namespace ft::comm
