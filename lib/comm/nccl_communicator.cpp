// NCCL communicator on the NCCL C API and the CUDA runtime API: non-blocking, abortable
// initialization; collectives on our own stream, ordered after LibTorch's current stream of the
// rank's device (what produced the tensors), under a guard that restores the caller's device;
// waits that poll the event and the communicator's async error until the timeout. Only the
// current-stream lookup needs LibTorch's CUDA headers: a CPU LibTorch (which compiles this file
// where the CUDA toolkit is installed) has no CUDA tensors to order after.
#include "comm/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <ATen/core/Tensor.h>

#include "util/build_info.h"
#if FT_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iomanip>
#include <mutex>
#include <sstream>
#include <thread>

#include "comm/communicator_state.h"
#include "comm/local_address.h"
#include "comm/peer_monitor.h"
#include "comm/process_exit.h"
#include "util/error.h"
#include "util/log.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "ft's NCCL communicator needs NCCL >= 2.14 (ncclCommInitRankConfig with non-blocking init)"
#endif

namespace ft::comm {
namespace {

Clock::time_point deadline_after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

void cuda_check(cudaError_t e, const char* what) {
  FT_CHECK(e == cudaSuccess, what, " failed: ", cudaGetErrorString(e));
}

// The stream LibTorch queues this device's work on (its current stream); the legacy default
// stream where LibTorch has no CUDA.
cudaStream_t torch_stream(int device) {
#if FT_TORCH_CUDA
  return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
#else
  (void)device;
  return cudaStreamLegacy;
#endif
}

// Makes `device` current for its lifetime, then restores the caller's.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    cuda_check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) cuda_check(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

bool nccl_type(at::ScalarType t, ncclDataType_t* out) {
  switch (t) {
    case at::kFloat: *out = ncclFloat32; return true;
    case at::kDouble: *out = ncclFloat64; return true;
    case at::kHalf: *out = ncclFloat16; return true;
    case at::kBFloat16: *out = ncclBfloat16; return true;
    case at::kChar: *out = ncclInt8; return true;
    case at::kByte: *out = ncclUint8; return true;
    case at::kBool: *out = ncclUint8; return true;
    case at::kInt: *out = ncclInt32; return true;
    case at::kLong: *out = ncclInt64; return true;
    default: return false;
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
  }
  return ncclSum;
}

struct Shared : CommunicatorState {
  int device = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  float* barrier_value = nullptr;  // one float on the device for barrier()

  std::string nccl_error(ncclResult_t r) const {
    std::string out = ncclGetErrorString(r);
    if (comm != nullptr) {
      const char* last = ncclGetLastError(comm);
      if (last != nullptr && *last != '\0') out += str(" (", last, ")");
    }
    return out;
  }

  // Aborting is the only way out of a communicator whose peers are gone (NVIDIA/nccl#289).
  void abort() {
    if (comm != nullptr) ncclCommAbort(comm);
    comm = nullptr;
  }

  [[noreturn]] void fail(const OpInfo& op, bool timed_out, double seconds, const std::string& backend_error) {
    std::string message = failure_message(op, timed_out, seconds, str(" (cuda:", device, ")"));
    if (!backend_error.empty()) message += ". NCCL said: " + backend_error;
    abort();
    record_failure(message + ". The NCCL communicator was aborted: end the process");
  }

  // Polls ncclCommGetAsyncError until the communicator leaves ncclInProgress (non-blocking
  // init or enqueue) or the deadline passes (then returns ncclInProgress).
  ncclResult_t settle(Clock::time_point deadline) {
    while (true) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
      if (r != ncclSuccess) return r;
      if (state != ncclInProgress) return state;
      if (Clock::now() >= deadline) return ncclInProgress;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  // Runs on our stream after whatever LibTorch has queued on its current stream of this device
  // (the kernels that wrote the tensors).
  template <typename F>
  cudaEvent_t enqueue(const OpInfo& op, F&& launch) {
    check_usable(op);
    DeviceGuard guard(device);
    cudaEvent_t ready = nullptr;
    cuda_check(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate");
    cuda_check(cudaEventRecord(ready, torch_stream(device)), "cudaEventRecord");
    cuda_check(cudaStreamWaitEvent(stream, ready, 0), "cudaStreamWaitEvent");
    cudaEventDestroy(ready);
    const auto start = Clock::now();
    ncclResult_t r = launch();
    if (r == ncclInProgress) r = settle(deadline_after(timeout_s));
    if (r == ncclInProgress) fail(op, true, seconds_since(start), "the operation could not even be enqueued");
    if (r != ncclSuccess) fail(op, false, seconds_since(start), nccl_error(r));
    cudaEvent_t done = nullptr;
    cuda_check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
    cuda_check(cudaEventRecord(done, stream), "cudaEventRecord");
    return done;
  }

  void wait(cudaEvent_t done, const OpInfo& op, Clock::time_point issued_at) {
    check_usable(op);
    const auto start = Clock::now();
    const auto deadline = deadline_after(timeout_s);
    auto pause = std::chrono::microseconds(10);
    while (true) {
      const cudaError_t e = cudaEventQuery(done);
      if (e == cudaSuccess) break;
      if (e != cudaErrorNotReady) fail(op, false, seconds_since(issued_at), str("CUDA: ", cudaGetErrorString(e)));
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm, &state);
      if (state != ncclSuccess && state != ncclInProgress) fail(op, false, seconds_since(issued_at), nccl_error(state));
      if (Clock::now() >= deadline) fail(op, true, seconds_since(start), "");
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
    if (monitor) monitor->completed_one();
  }

  void shutdown() {
    bool failed = false;
    failed = has_failed();
    DeviceGuard guard(device);
    if (failed) {
      if (monitor) monitor->stop();
      abort();
      return;  // the stream and buffer are left to the process' end: the device may be wedged
    }
    if (comm != nullptr) {
      // Finalize flushes outstanding work; it is non-blocking here, so poll it with the timeout.
      ncclResult_t r = ncclCommFinalize(comm);
      if (r == ncclSuccess || r == ncclInProgress) r = settle(deadline_after(timeout_s));
      if (r == ncclSuccess) {
        ncclCommDestroy(comm);
        comm = nullptr;
      } else {
        log::warn("NCCL communicator shutdown on rank ", rank, ": ", nccl_error(r), "; aborting it");
        abort();
      }
    }
    // Destroyed while an error unwinds the stack: leave at once, so the other ranks see this one
    // gone instead of waiting on it.
    if (monitor) monitor->leave(/*wait_for_others=*/std::uncaught_exceptions() == 0);
    if (barrier_value != nullptr) cudaFree(barrier_value);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<Shared> shared, cudaEvent_t done, OpInfo op, std::vector<at::Tensor> keep_alive)
      : shared_(std::move(shared)), done_event_(done), op_(std::move(op)), keep_alive_(std::move(keep_alive)),
        issued_at_(Clock::now()) {}
  ~NcclWork() override {
    if (done_event_ != nullptr) cudaEventDestroy(done_event_);
  }

  void wait() override {
    if (done_) return;
    shared_->wait(done_event_, op_, issued_at_);
    keep_alive_.clear();  // the caching allocator may reuse the memory only once NCCL is done with it
    done_ = true;
  }

 private:
  std::shared_ptr<Shared> shared_;
  cudaEvent_t done_event_;
  OpInfo op_;
  std::vector<at::Tensor> keep_alive_;
  Clock::time_point issued_at_;
  bool done_ = false;
};

class NcclCommunicator : public Communicator {
 public:
  explicit NcclCommunicator(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}
  ~NcclCommunicator() override { shared_->shutdown(); }

  int rank() const override { return shared_->rank; }
  int world_size() const override { return shared_->world_size; }
  int local_world_size() const override { return shared_->local_world_size; }
  std::string backend() const override { return "nccl"; }
  c10::Device device() const override { return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(shared_->device)); }

  std::shared_ptr<Work> all_reduce(at::Tensor& tensor, ReduceOp op) override {
    const OpInfo info = shared_->next_op("all_reduce", &tensor, dtype_name(tensor.scalar_type()) + ", " + reduce_op_name(op));
    const ncclDataType_t type = check_tensor(tensor, info, "");
    FT_CHECK(op != ReduceOp::kAvg || at::isFloatingType(tensor.scalar_type()), info.describe(),
             ": avg needs a floating-point tensor");
    if (tensor.numel() == 0) return completed_work();
    Shared& s = *shared_;
    cudaEvent_t done = s.enqueue(info, [&] {
      return ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), type, nccl_op(op), s.comm, s.stream);
    });
    return std::make_shared<NcclWork>(shared_, done, info, std::vector<at::Tensor>{tensor});
  }

  std::shared_ptr<Work> reduce_scatter(at::Tensor& output, const at::Tensor& input, ReduceOp op) override {
    const OpInfo info = shared_->next_op("reduce_scatter", &input, dtype_name(input.scalar_type()) + ", " + reduce_op_name(op));
    const ncclDataType_t type = check_tensor(input, info, "input");
    check_tensor(output, info, "output");
    const int world = shared_->world_size;
    FT_CHECK(input.scalar_type() == output.scalar_type(), info.describe(), ": input is ", input.scalar_type(),
             " but output is ", output.scalar_type());
    FT_CHECK(input.numel() == world * output.numel(), info.describe(), ": input has ", input.numel(),
             " elements, expected world_size (", world, ") x output's ", output.numel(), " = ", world * output.numel());
    FT_CHECK(op != ReduceOp::kAvg || at::isFloatingType(input.scalar_type()), info.describe(),
             ": avg needs a floating-point tensor");
    if (input.numel() == 0) return completed_work();
    Shared& s = *shared_;
    cudaEvent_t done = s.enqueue(info, [&] {
      return ncclReduceScatter(input.data_ptr(), output.data_ptr(), output.numel(), type, nccl_op(op), s.comm, s.stream);
    });
    return std::make_shared<NcclWork>(shared_, done, info, std::vector<at::Tensor>{input, output});
  }

  std::shared_ptr<Work> all_gather(at::Tensor& output, const at::Tensor& input) override {
    const OpInfo info = shared_->next_op("all_gather", &input, dtype_name(input.scalar_type()));
    const ncclDataType_t type = check_tensor(input, info, "input");
    check_tensor(output, info, "output");
    const int world = shared_->world_size;
    FT_CHECK(input.scalar_type() == output.scalar_type(), info.describe(), ": input is ", input.scalar_type(),
             " but output is ", output.scalar_type());
    FT_CHECK(output.numel() == world * input.numel(), info.describe(), ": output has ", output.numel(),
             " elements, expected world_size (", world, ") x input's ", input.numel(), " = ", world * input.numel());
    if (input.numel() == 0) return completed_work();
    Shared& s = *shared_;
    cudaEvent_t done = s.enqueue(info, [&] {
      return ncclAllGather(input.data_ptr(), output.data_ptr(), input.numel(), type, s.comm, s.stream);
    });
    return std::make_shared<NcclWork>(shared_, done, info, std::vector<at::Tensor>{input, output});
  }

  std::shared_ptr<Work> broadcast(at::Tensor& tensor, int root) override {
    const OpInfo info = shared_->next_op("broadcast", &tensor, str(dtype_name(tensor.scalar_type()), ", from rank ", root));
    const ncclDataType_t type = check_tensor(tensor, info, "");
    FT_CHECK(root >= 0 && root < shared_->world_size, info.describe(), ": root ", root, " is not a rank (0..",
             shared_->world_size - 1, ")");
    if (tensor.numel() == 0) return completed_work();
    Shared& s = *shared_;
    cudaEvent_t done = s.enqueue(info, [&] {
      return ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), type, root, s.comm, s.stream);
    });
    return std::make_shared<NcclWork>(shared_, done, info, std::vector<at::Tensor>{tensor});
  }

  void barrier() override {
    const OpInfo info = shared_->next_op("barrier", nullptr, "");
    Shared& s = *shared_;
    cudaEvent_t done = s.enqueue(info, [&] {
      return ncclAllReduce(s.barrier_value, s.barrier_value, 1, ncclFloat32, ncclSum, s.comm, s.stream);
    });
    NcclWork(shared_, done, info, {}).wait();
  }

 private:
  ncclDataType_t check_tensor(const at::Tensor& t, const OpInfo& op, const char* which) const {
    FT_CHECK(t.defined(), op.describe(), ": the ", which, " tensor is undefined");
    FT_CHECK(t.device().is_cuda() && t.device().index() == shared_->device, op.describe(), ": the NCCL communicator of rank ",
             shared_->rank, " works on cuda:", shared_->device, ", the ", which, " tensor is on ", t.device());
    FT_CHECK(t.layout() == at::kStrided && t.is_contiguous(), op.describe(), ": the ", which,
             " tensor must be dense and contiguous: pass .contiguous()");
    ncclDataType_t type;
    FT_CHECK(nccl_type(t.scalar_type(), &type), op.describe(), ": dtype ", t.scalar_type(), " is not supported by NCCL");
    shared_->check_usable(op);
    return type;
  }

  std::shared_ptr<Shared> shared_;
};

int g_instances = 0;

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const RankEnv& env, std::shared_ptr<Store> store,
                                                     int device_index, double timeout_s) {
  FT_CHECK(timeout_s > 0, "NCCL communicator: timeout must be > 0 s, got ", timeout_s);
  FT_CHECK(store != nullptr || !env.distributed(), "NCCL communicator for rank ", env.rank,
           ": no store (call rendezvous() first)");
  int devices = 0;
  const cudaError_t count_error = cudaGetDeviceCount(&devices);
  FT_CHECK(count_error == cudaSuccess && devices > 0, "rank ", env.rank, " wants cuda:", device_index,
           " for NCCL but no CUDA device is usable here (",
           count_error == cudaSuccess ? "none visible" : cudaGetErrorString(count_error), ")");
  FT_CHECK(device_index >= 0 && device_index < devices, "rank ", env.rank, " (local rank ", env.local_rank,
           ") wants cuda:", device_index, " but this machine shows ", devices,
           " CUDA devices: LOCAL_WORLD_SIZE is larger than the GPU count, or CUDA_VISIBLE_DEVICES hides some");

  auto shared = std::make_shared<Shared>();
  shared->rank = env.rank;
  shared->world_size = env.world_size;
  shared->local_world_size = env.local_world_size;
  shared->device = device_index;
  shared->timeout_s = timeout_s;
  shared->name = str("nccl", g_instances++);
  shared->store = store;
  // A world of one (parallel.backend nccl on one GPU) has no peers to watch and no id to share.
  if (env.distributed())
    shared->monitor = std::make_unique<PeerMonitor>(*store, env.rank, env.world_size, shared->name, timeout_s);
  cuda_check(cudaSetDevice(device_index), "cudaSetDevice");
  cuda_check(cudaStreamCreateWithFlags(&shared->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  cuda_check(cudaMalloc(reinterpret_cast<void**>(&shared->barrier_value), sizeof(float)), "cudaMalloc");

  const auto start = Clock::now();
  const auto deadline = deadline_after(timeout_s);
  OpInfo init;
  init.name = "initializing NCCL";
  auto fail_init = [&](bool timed_out, const std::string& why) {
    // No communicator object exists yet for the NCCL-level shutdown: stop the monitor ourselves.
    std::string message = str("initializing NCCL (rank ", env.rank, " of ", env.world_size, ", cuda:", device_index, ") ",
                              timed_out ? "timed out after " : "failed after ", format_seconds(seconds_since(start)), " s: ",
                              shared->monitor ? shared->monitor->diagnose() : "the only rank",
                              why.empty() ? "" : ". " + why);
    shared->abort();
    shared->failure = message;
    if (shared->monitor) shared->monitor->stop();
    note_communication_failure();
    throw Error(message);
  };

  // NCCL's bootstrap and socket transport pick the first interface that is up unless told: on a
  // host with several, maybe one the other nodes cannot reach. NCCL reads the variable at its
  // first call, so it is set before the unique id is made.
  const char* ifname = std::getenv("NCCL_SOCKET_IFNAME");
  if (env.local_world_size < env.world_size && (ifname == nullptr || *ifname == '\0')) {
    const LocalAddress local = address_for_other_hosts(env, "NCCL_SOCKET_IFNAME");
    if (!local.interface.empty()) {
      ::setenv("NCCL_SOCKET_IFNAME", ("=" + local.interface).c_str(), 1);
      log::info("nccl: NCCL_SOCKET_IFNAME==", local.interface, " (", local.address,
                ", the route to MASTER_ADDR=", env.master_addr, "); set NCCL_SOCKET_IFNAME to pick another");
    }
  }

  // The unique id travels through the store.
  ncclUniqueId id;
  const std::string id_key = "ft/" + shared->name + "/unique_id";
  if (env.rank == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) fail_init(false, str("ncclGetUniqueId: ", ncclGetErrorString(r)));
    if (store) store->set(id_key, std::string(id.internal, sizeof(id.internal)));
  } else {
    const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    if (!store->wait_for({id_key}, std::max(left, 0.0))) fail_init(true, "rank 0 never published the NCCL unique id");
    const std::string bytes = store->get(id_key);
    FT_ASSERT(bytes.size() == sizeof(id.internal), "NCCL unique id of ", bytes.size(), " bytes");
    std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  }

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that an init waiting for a rank that never comes can be aborted
  ncclResult_t r = ncclCommInitRankConfig(&shared->comm, env.world_size, id, env.rank, &config);
  if (r == ncclSuccess || r == ncclInProgress) r = shared->settle(deadline);
  if (r == ncclInProgress) fail_init(true, "");
  if (r != ncclSuccess) fail_init(false, "NCCL said: " + shared->nccl_error(r));
  log::debug("nccl: rank ", env.rank, " of ", env.world_size, " on cuda:", device_index, " ready in ", format_seconds(seconds_since(start)), " s");
  return std::make_unique<NcclCommunicator>(std::move(shared));
}

}  // namespace ft::comm
