// Gloo communicator: c10d's ProcessGroupGloo behind ft's Communicator, with our own deadline on
// every wait (Gloo's are not reliable in LibTorch 1.13), reduce_scatter as all-to-all + local sum,
// all_gather as point-to-point sends and receives straight into the output, and failures reported
// with the peer monitor's view.
#include "comm/gloo_communicator.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/torch.h>

#include <atomic>
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <functional>
#include <iomanip>
#include <limits>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "comm/communicator_state.h"
#include "comm/local_address.h"
#include "comm/peer_monitor.h"
#include "comm/process_exit.h"
#include "comm/store_impl.h"
#include "util/error.h"
#include "util/log.h"
#include "util/timer.h"

namespace ft::comm {
namespace {


// Dtypes this LibTorch's Gloo moves and reduces itself.
bool gloo_native(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kChar || t == at::kByte || t == at::kInt ||
         t == at::kLong;
}
// For pure data movement, a same-width dtype Gloo knows: bfloat16 travels as float16 bits, bool as uint8.
at::Tensor as_movable(const at::Tensor& t) {
  if (t.scalar_type() == at::kBFloat16) return t.view(at::kHalf);
  if (t.scalar_type() == at::kBool) return t.view(at::kByte);
  return t;
}

struct Shared : CommunicatorState {
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
  std::vector<c10::intrusive_ptr<c10d::Work>> in_flight;  // issued; pruned when completed (under mutex)

  [[noreturn]] void fail(const OpInfo& op, bool timed_out, double seconds, const std::string& backend_error) {
    std::string message = failure_message(op, timed_out, seconds, "");
    if (!backend_error.empty()) message += ". Gloo said: " + backend_error;
    record_failure(message + ". This communicator cannot be used any more: end the process");
  }

  // Issues a c10d call; an exception here (a broken pair, a dtype Gloo refuses) is a failure too.
  template <typename F>
  c10::intrusive_ptr<c10d::Work> issue(const OpInfo& op, F&& call) {
    check_usable(op);
    c10::intrusive_ptr<c10d::Work> work;
    try {
      work = call();
    } catch (const std::exception& e) {
      fail(op, false, 0.0, short_message(e));
    }
    std::lock_guard<std::mutex> lock(mutex);
    in_flight.erase(std::remove_if(in_flight.begin(), in_flight.end(), [](const auto& w) { return w->isCompleted(); }),
                    in_flight.end());
    in_flight.push_back(work);
    return work;
  }

  // Waits for the works of one operation, all of them within timeout_s; on failure or timeout
  // throws the named error. The operation counts as one completed collective.
  void wait(const std::vector<c10::intrusive_ptr<c10d::Work>>& works, const OpInfo& op, Clock::time_point issued_at) {
    check_usable(op);
    const auto wait_start = Clock::now();
    const auto deadline = wait_start + to_milliseconds(timeout_s);
    for (const auto& work : works) {
      std::string error;
      bool timed_out = false;
      while (true) {
        try {
          // Rounded up, and waited again if woken early: the timeout is never reported before
          // the deadline (a wait truncated to whole milliseconds used to end up to 1 ms short).
          const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
          work->wait(std::max(left, std::chrono::milliseconds(1)));
        } catch (const std::exception& e) {
          if (!work->isCompleted() && Clock::now() < deadline) continue;
          // A collective that gives up is not completed; a send or receive is, with Gloo's timeout
          // as its exception: ours is the deadline that passed.
          if (!work->isCompleted() || Clock::now() >= deadline) {
            timed_out = true;
          } else if (work->exception()) {
            error = short_message(e);
          }  // else it completed just as the wait gave up: fine
        }
        break;
      }
      if (timed_out) fail(op, true, seconds_since(wait_start), "");
      if (!error.empty()) fail(op, false, seconds_since(issued_at), error);
    }
    monitor->completed_one();
  }

  // Tags of the point-to-point transfers of all_gather: the same sequence on every rank, as the
  // operations are issued in the same order. Gloo keeps them apart from its collectives' slots,
  // which carry a prefix in their high bits.
  std::int32_t next_transfer_tag() {
    const std::int32_t tag = transfer_tag;
    transfer_tag = transfer_tag == std::numeric_limits<std::int32_t>::max() ? 0 : transfer_tag + 1;
    return tag;
  }
  std::int32_t transfer_tag = 0;

  void shutdown() {
    bool failed = false;
    std::vector<c10::intrusive_ptr<c10d::Work>> pending;
    {
      std::lock_guard<std::mutex> lock(mutex);
      failed = !failure.empty();
      pending.swap(in_flight);
    }
    // Work issued but never waited for (an exception unwound past it) must finish before the
    // process group's destructor joins Gloo's threads; give it the timeout, else treat it as failed.
    const auto deadline = Clock::now() + to_milliseconds(timeout_s);
    for (const auto& work : pending) {
      if (failed) break;
      try {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        work->wait(std::max(left, std::chrono::milliseconds(1)));
      } catch (const std::exception& e) {
        failed = true;
        note_communication_failure();
        log::warn("gloo: a collective issued but never waited for did not finish at shutdown: ", short_message(e));
      }
    }
    if (failed) {
      // Gloo's threads may be blocked for good on a dead or stopped peer, and the process
      // group's destructor would join them: leak it, the process is about to end anyway.
      if (monitor) monitor->stop();
      pg.release();
      return;
    }
    // Destroyed while an error unwinds the stack: leave at once, so the other ranks see this one
    // gone instead of waiting on it.
    if (monitor) monitor->leave(/*wait_for_others=*/std::uncaught_exceptions() == 0);
    pg.reset();
  }
};

class GlooWork : public Work {
 public:
  GlooWork(std::shared_ptr<Shared> shared, c10::intrusive_ptr<c10d::Work> work, OpInfo op,
           std::function<void()> finish)
      : GlooWork(std::move(shared), std::vector<c10::intrusive_ptr<c10d::Work>>{std::move(work)}, std::move(op),
                 std::move(finish)) {}
  // One operation made of several transfers (all_gather's sends and receives).
  GlooWork(std::shared_ptr<Shared> shared, std::vector<c10::intrusive_ptr<c10d::Work>> works, OpInfo op,
           std::function<void()> finish)
      : shared_(std::move(shared)), works_(std::move(works)), op_(std::move(op)), finish_(std::move(finish)),
        issued_at_(Clock::now()) {}

  void wait() override {
    if (done_) return;
    shared_->wait(works_, op_, issued_at_);
    if (finish_) finish_();
    done_ = true;
  }

 private:
  std::shared_ptr<Shared> shared_;
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
  OpInfo op_;
  std::function<void()> finish_;
  Clock::time_point issued_at_;
  bool done_ = false;
};

void check_tensor(const at::Tensor& t, const OpInfo& op, const char* which) {
  FT_CHECK(t.defined(), op.describe(), ": the ", which, " tensor is undefined");
  FT_CHECK(t.device().is_cpu(), op.describe(), ": the Gloo backend takes CPU tensors, the ", which, " tensor is on ",
           t.device(), " (parallel.backend auto picks NCCL for CUDA devices)");
  FT_CHECK(t.layout() == at::kStrided && t.is_contiguous(), op.describe(), ": the ", which,
           " tensor must be dense and contiguous (shape ", t.sizes(), ", strides ", t.strides(), "): pass .contiguous()");
  const auto dtype = t.scalar_type();
  FT_CHECK(gloo_native(dtype) || dtype == at::kBFloat16 || dtype == at::kBool, op.describe(), ": dtype ",
           dtype_name(dtype), " is not supported by the Gloo backend (float32/64, float16, bfloat16, int8/32/64, uint8, bool)");
}

class GlooCommunicator : public Communicator {
 public:
  explicit GlooCommunicator(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}
  ~GlooCommunicator() override { shared_->shutdown(); }

  int rank() const override { return shared_->rank; }
  int world_size() const override { return shared_->world_size; }
  int local_world_size() const override { return shared_->local_world_size; }
  std::string backend() const override { return "gloo"; }
  c10::Device device() const override { return c10::kCPU; }

  std::shared_ptr<Work> all_reduce(at::Tensor& tensor, ReduceOp op) override {
    const OpInfo info = shared_->next_op("all_reduce", &tensor, dtype_name(tensor.scalar_type()) + ", " + reduce_op_name(op));
    check_tensor(tensor, info, "");
    const auto dtype = tensor.scalar_type();
    FT_CHECK(op != ReduceOp::kAvg || at::isFloatingType(dtype), info.describe(),
             ": avg needs a floating-point tensor (sum, then divide)");
    FT_CHECK(dtype != at::kBool || op == ReduceOp::kMax, info.describe(), ": bool tensors reduce with max only");
    shared_->check_usable(info);
    if (tensor.numel() == 0) return completed_work();
    // bfloat16 is reduced in float32 (Gloo here has no bfloat16), bool as uint8.
    const bool staged = dtype == at::kBFloat16;
    at::Tensor send = staged ? tensor.to(at::kFloat) : as_movable(tensor);
    c10d::AllreduceOptions options;
    options.reduceOp = op == ReduceOp::kMax ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM;
    options.timeout = gloo_timeout();
    std::vector<at::Tensor> tensors{send};
    auto work = shared_->issue(info, [&] { return shared_->pg->allreduce(tensors, options); });
    const int world = shared_->world_size;
    at::Tensor target = tensor;
    return std::make_shared<GlooWork>(shared_, work, info, [target, send, op, staged, world]() mutable {
      if (op == ReduceOp::kAvg) send.div_(world);
      if (staged) target.copy_(send);
    });
  }

  std::shared_ptr<Work> reduce_scatter(at::Tensor& output, const at::Tensor& input, ReduceOp op) override {
    const OpInfo info = shared_->next_op("reduce_scatter", &input, dtype_name(input.scalar_type()) + ", " + reduce_op_name(op));
    check_tensor(input, info, "input");
    check_tensor(output, info, "output");
    const int world = shared_->world_size;
    FT_CHECK(input.scalar_type() == output.scalar_type(), info.describe(), ": input is ", dtype_name(input.scalar_type()),
             " but output is ", dtype_name(output.scalar_type()));
    FT_CHECK(input.numel() == world * output.numel(), info.describe(), ": input has ", input.numel(),
             " elements, expected world_size (", world, ") x output's ", output.numel(), " = ", world * output.numel());
    FT_CHECK(op != ReduceOp::kAvg || at::isFloatingType(input.scalar_type()), info.describe(),
             ": avg needs a floating-point tensor (sum, then divide)");
    FT_CHECK(input.scalar_type() != at::kBool || op == ReduceOp::kMax, info.describe(), ": bool tensors reduce with max only");
    shared_->check_usable(info);
    if (input.numel() == 0) return completed_work();
    // All-to-all: chunk j of every rank's input goes to rank j, so each rank sends and receives
    // (W-1)/W of the buffer; the reduction over the W received chunks is local.
    at::Tensor send = as_movable(input.reshape({-1}));
    at::Tensor received = at::empty_like(send);
    std::vector<std::int64_t> equal_splits;
    c10d::AllToAllOptions options;
    options.timeout = gloo_timeout();
    auto work = shared_->issue(info, [&] {
      return shared_->pg->alltoall_base(received, send, equal_splits, equal_splits, options);
    });
    at::Tensor target = output;
    const at::ScalarType dtype = input.scalar_type();
    return std::make_shared<GlooWork>(shared_, work, info, [target, received, op, world, dtype]() mutable {
      at::Tensor chunks = received.view(dtype).view({world, -1});
      at::Tensor result;
      if (op == ReduceOp::kMax) {
        result = std::get<0>(chunks.max(0));
      } else {
        // Half-precision chunks are summed in float32, in rank order (the same on every rank).
        const bool low = dtype == at::kHalf || dtype == at::kBFloat16;
        result = (low ? chunks.to(at::kFloat) : chunks).sum(0);
        if (op == ReduceOp::kAvg) result.div_(world);
      }
      target.view({-1}).copy_(result);
    });
  }

  std::shared_ptr<Work> all_gather(at::Tensor& output, const at::Tensor& input) override {
    const OpInfo info = shared_->next_op("all_gather", &input, dtype_name(input.scalar_type()));
    check_tensor(input, info, "input");
    check_tensor(output, info, "output");
    const int world = shared_->world_size;
    FT_CHECK(input.scalar_type() == output.scalar_type(), info.describe(), ": input is ", dtype_name(input.scalar_type()),
             " but output is ", dtype_name(output.scalar_type()));
    FT_CHECK(output.numel() == world * input.numel(), info.describe(), ": output has ", output.numel(),
             " elements, expected world_size (", world, ") x input's ", input.numel(), " = ", world * input.numel());
    shared_->check_usable(info);
    if (input.numel() == 0) return completed_work();
    // Not Gloo's allgather: that one gathers into a buffer of its own and then copies it into the
    // output, one extra pass over the whole output (ZeRO-2 gathers all parameters every step,
    // FSDP every layer twice). Here each rank sends its chunk to every other rank, and each chunk
    // is received straight into its place in the output: each rank still sends and receives
    // (W-1)/W of the buffer, as in Gloo's ring.
    at::Tensor flat_out = output.view({-1});
    at::Tensor flat_in = input.reshape({-1});
    const std::int64_t n = flat_in.numel();
    const int rank = shared_->rank;
    at::Tensor own = flat_out.narrow(0, rank * n, n);
    if (own.data_ptr() != flat_in.data_ptr()) own.copy_(flat_in);
    // Each chunk is followed by an empty message. Gloo 1.13's TCP pair does not fail a receive
    // whose bytes are arriving when the peer's connection closes (it fails only those not yet
    // started), so a peer dying in the middle of its chunk would leave this rank waiting out the
    // whole timeout; the empty message behind it is not started yet and fails at once. The wait
    // begins with those.
    const std::int32_t tag = shared_->next_transfer_tag();
    const std::int32_t end_tag = shared_->next_transfer_tag();
    const at::Tensor end_mark = at::empty({0}, flat_out.options().dtype(at::kByte));
    std::vector<c10::intrusive_ptr<c10d::Work>> ends, chunks, sends;
    for (int step = 1; step < world; ++step) {
      // Send to the rank `step` places on and receive from the one `step` places back: each rank
      // talks to a different peer at each step, as in a ring.
      const int to = (rank + step) % world, from = (rank - step + world) % world;
      std::vector<at::Tensor> received{flat_out.narrow(0, from * n, n)}, received_end{end_mark};
      chunks.push_back(shared_->issue(info, [&] { return shared_->pg->recv(received, from, tag); }));
      ends.push_back(shared_->issue(info, [&] { return shared_->pg->recv(received_end, from, end_tag); }));
      std::vector<at::Tensor> sent{own}, sent_end{end_mark};
      sends.push_back(shared_->issue(info, [&] { return shared_->pg->send(sent, to, tag); }));
      sends.push_back(shared_->issue(info, [&] { return shared_->pg->send(sent_end, to, end_tag); }));
    }
    std::vector<c10::intrusive_ptr<c10d::Work>> works = std::move(ends);
    works.insert(works.end(), chunks.begin(), chunks.end());
    works.insert(works.end(), sends.begin(), sends.end());
    return std::make_shared<GlooWork>(shared_, std::move(works), info, nullptr);
  }

  std::shared_ptr<Work> broadcast(at::Tensor& tensor, int root) override {
    const OpInfo info = shared_->next_op("broadcast", &tensor, str(dtype_name(tensor.scalar_type()), ", from rank ", root));
    check_tensor(tensor, info, "");
    FT_CHECK(root >= 0 && root < shared_->world_size, info.describe(), ": root ", root, " is not a rank (0..",
             shared_->world_size - 1, ")");
    shared_->check_usable(info);
    if (tensor.numel() == 0) return completed_work();
    std::vector<at::Tensor> tensors{as_movable(tensor)};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    options.rootTensor = 0;
    options.timeout = gloo_timeout();
    auto work = shared_->issue(info, [&] { return shared_->pg->broadcast(tensors, options); });
    return std::make_shared<GlooWork>(shared_, work, info, nullptr);
  }

  void barrier() override {
    const OpInfo info = shared_->next_op("barrier", nullptr, "");
    c10d::BarrierOptions options;
    options.timeout = gloo_timeout();
    auto work = shared_->issue(info, [&] { return shared_->pg->barrier(options); });
    GlooWork(shared_, work, info, nullptr).wait();
  }

 private:
  // Gloo's own timeout is set past ours, so that our deadline (with its diagnosis) fires first.
  std::chrono::milliseconds gloo_timeout() const { return to_milliseconds(shared_->timeout_s + 5.0); }

  std::shared_ptr<Shared> shared_;
};

int g_instances = 0;  // communicators made in this process: names their store keys

// Each rank publishes the address it advertises to Gloo, so that a rank that cannot connect to
// an address can say whose it is.
std::string advertised_key(const std::string& name, int rank) { return str("ft/", name, "/advertised/", rank); }

// For Gloo's "connect [ADDRESS]:PORT: REASON": which ranks advertised ADDRESS, and how they chose
// it. "" when the error is another one, or nobody published that address.
std::string explain_connect_failure(Store& store, const std::string& name, int world, const std::string& gloo_error) {
  const auto open = gloo_error.find("connect [");
  if (open == std::string::npos) return "";
  const auto close = gloo_error.find(']', open);
  if (close == std::string::npos) return "";
  const std::string address = gloo_error.substr(open + 9, close - open - 9);
  const auto colon = gloo_error.find(": ", close);
  const std::string reason = colon == std::string::npos ? "" : gloo_error.substr(colon + 2);
  std::vector<int> ranks;
  std::string how;
  try {
    for (int p = 0; p < world; ++p) {
      if (!store.check(advertised_key(name, p))) continue;
      const std::string value = store.get(advertised_key(name, p));
      const auto tab = value.find('\t');
      if (value.substr(0, tab) != address) continue;
      ranks.push_back(p);
      if (how.empty() && tab != std::string::npos) how = value.substr(tab + 1);
    }
  } catch (const std::exception&) {
    return "";  // the store is gone too: the monitor's diagnosis says so
  }
  if (ranks.empty()) return "";
  std::string who = ranks.size() > 1 ? "ranks " : "rank ";
  for (std::size_t i = 0; i < ranks.size(); ++i) who += str(i ? ", " : "", ranks[i]);
  return str("cannot reach ", who, " at ", address, " (", how, ")", reason.empty() ? "" : ": " + reason,
             ". Every rank must reach the address each other rank advertises: on that node, set GLOO_SOCKET_IFNAME "
             "to the interface on the network the nodes share, or unset it (ft then takes the route to MASTER_ADDR)");
}

}  // namespace

std::unique_ptr<Communicator> make_gloo_communicator(const RankEnv& env, std::shared_ptr<Store> store,
                                                     double timeout_s) {
  FT_CHECK(timeout_s > 0, "Gloo communicator: timeout must be > 0 s, got ", timeout_s);
  if (!env.distributed()) return make_single_process_communicator();
  FT_CHECK(store != nullptr, "Gloo communicator for rank ", env.rank, " of ", env.world_size,
           ": no store (call rendezvous() first)");
  auto shared = std::make_shared<Shared>();
  shared->rank = env.rank;
  shared->world_size = env.world_size;
  shared->local_world_size = env.local_world_size;
  shared->timeout_s = timeout_s;
  shared->name = str("gloo", g_instances++);
  shared->store = store;
  shared->monitor = std::make_unique<PeerMonitor>(*store, env.rank, env.world_size, shared->name, timeout_s);

  std::shared_ptr<::gloo::transport::Device> device;
  std::string bound;       // for messages: the address and how it was chosen
  std::string advertised;  // the numeric address
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname != nullptr && *ifname != '\0') {
    device = c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
    advertised = interface_address(ifname);
    bound = str("interface ", ifname, " from GLOO_SOCKET_IFNAME");
  } else if (env.local_world_size == env.world_size) {
    device = c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
    advertised = "127.0.0.1";
    bound = "127.0.0.1: all ranks on one node";
  } else {
    // Not the host name's address (Gloo's default): that is 127.0.1.1 on many hosts.
    const LocalAddress local = address_for_other_hosts(env, "GLOO_SOCKET_IFNAME");
    device = c10d::ProcessGroupGloo::createDeviceForHostname(local.address);
    advertised = local.address;
    bound = str(local.interface.empty() ? "" : "interface " + local.interface + ", ", "the route to MASTER_ADDR=",
                env.master_addr, "; GLOO_SOCKET_IFNAME picks another");
  }
  store->set(advertised_key(shared->name, env.rank), advertised + "\t" + bound);
  auto options = c10d::ProcessGroupGloo::Options::create(to_milliseconds(timeout_s + 5.0));
  options->devices.push_back(device);

  // Connecting the full mesh runs on a helper thread with our deadline: a peer that dies or
  // stops now could otherwise keep this rank waiting inside Gloo.
  struct Connect {
    std::mutex mutex;
    std::condition_variable cv;
    bool done = false;
    c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
    std::string error;
  };
  auto connect = std::make_shared<Connect>();
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(store->impl().key("ft/" + shared->name), store->impl().tcp);
  const int rank = env.rank;
  const int world = env.world_size;
  const auto start = Clock::now();
  std::thread([connect, prefixed, rank, world, options] {
    c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
    std::string error;
    try {
      pg = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, rank, world, options);
    } catch (const std::exception& e) {
      error = short_message(e);
    }
    std::lock_guard<std::mutex> lock(connect->mutex);
    connect->pg = std::move(pg);
    connect->error = std::move(error);
    connect->done = true;
    connect->cv.notify_all();
  }).detach();
  bool done = false;
  {
    std::unique_lock<std::mutex> lock(connect->mutex);
    done = connect->cv.wait_for(lock, to_milliseconds(timeout_s), [&] { return connect->done; });
  }
  OpInfo op;
  op.name = "connecting the Gloo process group";
  if (!done || !connect->error.empty()) {
    const std::string unreachable = done ? explain_connect_failure(*store, shared->name, world, connect->error) : "";
    const std::string what = str("connecting the Gloo process group (", advertised, ", ", bound, ") ",
                                 done ? "failed" : "timed out", " after ", format_seconds(seconds_since(start)),
                                 " s on rank ", rank, " of ", world, ": ",
                                 unreachable.empty() ? shared->monitor->diagnose() : unreachable,
                                 done ? ". Gloo said: " + connect->error : std::string());
    shared->failure = what;
    note_communication_failure();
    shared->monitor->stop();
    throw Error(what);
  }
  shared->pg = connect->pg;
  connect->pg.reset();
  log::debug("gloo: rank ", rank, " of ", world, " connected in ", format_seconds(seconds_since(start)), " s (",
             advertised, ", ", bound, ")");
  return std::make_unique<GlooCommunicator>(std::move(shared));
}

}  // namespace ft::comm
