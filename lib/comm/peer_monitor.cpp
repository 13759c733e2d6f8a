// The heartbeat thread behind the communicators' failure messages, and the /proc checks that
// tell an exited rank from a stopped one when the ranks share a machine.
#include "comm/peer_monitor.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iomanip>
#include <mutex>
#include <sstream>
#include <vector>

#include "util/error.h"

namespace ft::comm {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string host_name() {
  char buffer[256] = {0};
  if (::gethostname(buffer, sizeof(buffer) - 1) != 0) return "?";
  return buffer;
}

// State letter and start time (clock ticks after boot) from /proc/<pid>/stat.
bool read_stat(long pid, char* state, std::uint64_t* start_ticks) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!in || !std::getline(in, text)) return false;
  const std::size_t close = text.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos || close + 2 >= text.size()) return false;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  std::vector<std::string> values;
  while (fields >> field) values.push_back(field);
  if (values.size() < 20) return false;
  *state = values[0][0];
  *start_ticks = std::strtoull(values[19].c_str(), nullptr, 10);  // field 22 of stat(5)
  return true;
}

std::string fmt_seconds(double s) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(s < 10 ? 1 : 0) << s;
  return out.str();
}

}  // namespace

ProcessInfo this_process() {
  ProcessInfo info;
  info.host = host_name();
  info.pid = static_cast<long>(::getpid());
  char state = 0;
  read_stat(info.pid, &state, &info.start_ticks);
  return info;
}

std::string process_info_key(int rank) { return str("ft/rdzv/rank/", rank); }

std::string encode_process(const ProcessInfo& info) { return str(info.host, " ", info.pid, " ", info.start_ticks); }

std::optional<ProcessInfo> decode_process(const std::string& text) {
  std::istringstream in(text);
  ProcessInfo info;
  if (!(in >> info.host >> info.pid >> info.start_ticks)) return std::nullopt;
  return info;
}

ProcessState local_process_state(const ProcessInfo& info) {
  static const std::string here = host_name();
  // FT_PEER_MONITOR_PROC=0 turns the /proc view off, as if every rank ran on another machine
  // (tests use it to exercise the heartbeat-only diagnosis).
  static const bool use_proc = [] {
    const char* v = std::getenv("FT_PEER_MONITOR_PROC");
    return v == nullptr || std::string(v) != "0";
  }();
  if (!use_proc || info.host != here || info.pid <= 0) return ProcessState::kElsewhere;
  char state = 0;
  std::uint64_t ticks = 0;
  if (!read_stat(info.pid, &state, &ticks)) return ProcessState::kGone;
  if (info.start_ticks != 0 && ticks != info.start_ticks) return ProcessState::kGone;  // pid reused
  if (state == 'Z' || state == 'X' || state == 'x') return ProcessState::kGone;
  if (state == 'T' || state == 't') return ProcessState::kStopped;
  return ProcessState::kRunning;
}

std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kChar: return "int8";
    case at::kByte: return "uint8";
    case at::kShort: return "int16";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    case at::kBool: return "bool";
    default: return c10::toString(t);
  }
}
std::string OpInfo::describe() const {
  std::string out = str(name, " #", number);
  if (name != "barrier") out += str(" of ", bytes, " bytes");
  if (!detail.empty()) out += " (" + detail + ")";
  return out;
}

struct PeerMonitor::State {
  struct Peer {
    std::int64_t heartbeat = -1;
    Clock::time_point heartbeat_changed;
    std::int64_t completed = 0;
    std::optional<ProcessInfo> info;
  };

  std::shared_ptr<Store> client;
  int rank = 0;
  int world_size = 1;
  std::string prefix;
  std::string store_address;
  double timeout_s = 300;
  double interval_s = 1;
  double stale_s = 3;
  Clock::time_point started;
  std::atomic<std::int64_t> completed{0};

  std::mutex mutex;
  std::condition_variable cv;
  bool stop = false;
  bool exited = false;
  bool detached = false;  // stop() gave up waiting for the thread
  std::vector<Peer> peers;
  std::string store_error;  // the store connection failed (rank 0 gone or unreachable)
  bool in_call = false;     // a store call is in progress since in_call_since
  Clock::time_point in_call_since;

  template <typename F>
  auto call(F&& f) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      in_call = true;
      in_call_since = Clock::now();
    }
    auto result = f();
    std::lock_guard<std::mutex> lock(mutex);
    in_call = false;
    return result;
  }

  std::string key(const char* what, int r) const { return str(prefix, what, "/", r); }

  void tick() {
    call([&] { return client->add(key("hb", rank), 1); });
    for (int p = 0; p < world_size; ++p) {
      if (p == rank) continue;
      const std::int64_t hb = call([&] { return client->add(key("hb", p), 0); });
      const std::int64_t peer_done = call([&] { return client->add(key("done", p), 0); });
      bool need_info = false;
      {
        std::lock_guard<std::mutex> lock(mutex);
        need_info = !peers[p].info.has_value();
      }
      std::optional<ProcessInfo> info;
      if (need_info && call([&] { return client->check(process_info_key(p)); })) {
        info = decode_process(call([&] { return client->get(process_info_key(p)); }));
      }
      std::lock_guard<std::mutex> lock(mutex);
      Peer& peer = peers[p];
      if (hb != peer.heartbeat) {
        peer.heartbeat = hb;
        peer.heartbeat_changed = Clock::now();
      }
      peer.completed = peer_done;
      if (info) peer.info = info;
    }
  }

  // Every `interval_s`: heartbeat, and read everyone else's heartbeat and count. In between,
  // every 50 ms at most, publish this rank's count when it changed.
  void run() {
    std::int64_t published = 0;
    auto last_tick = Clock::now() - std::chrono::hours(1);
    try {
      while (true) {
        if (seconds_between(last_tick, Clock::now()) >= interval_s) {
          last_tick = Clock::now();
          tick();
        }
        const std::int64_t done = completed.load();
        if (done != published) {
          call([&] { return client->add(key("done", rank), done - published); });
          published = done;
        }
        std::unique_lock<std::mutex> lock(mutex);
        cv.wait_for(lock, std::chrono::milliseconds(50), [&] { return stop; });
        if (stop) break;
      }
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mutex);
      store_error = e.what();
    }
    std::lock_guard<std::mutex> lock(mutex);
    exited = true;
    cv.notify_all();
  }
};

PeerMonitor::PeerMonitor(const Store& store, int rank, int world_size, const std::string& name, double timeout_s)
    : state_(std::make_shared<State>()) {
  State& s = *state_;
  s.client = store.new_client();
  s.rank = rank;
  s.world_size = world_size;
  s.prefix = "ft/monitor/" + name + "/";
  s.store_address = store.address();
  s.timeout_s = timeout_s;
  s.interval_s = std::clamp(timeout_s / 10.0, 0.1, 1.0);
  s.stale_s = 3 * s.interval_s + 0.2;
  s.started = Clock::now();
  s.peers.resize(world_size);
  for (auto& p : s.peers) p.heartbeat_changed = s.started;
  // rendezvous() published every rank's process: know them before the first collective.
  for (int p = 0; p < world_size; ++p) {
    if (p != rank && s.client->check(process_info_key(p))) s.peers[p].info = decode_process(s.client->get(process_info_key(p)));
  }
  thread_ = std::thread([state = state_] { state->run(); });
}

PeerMonitor::~PeerMonitor() { stop(); }

void PeerMonitor::completed_one() { state_->completed.fetch_add(1); }
std::int64_t PeerMonitor::completed() const { return state_->completed.load(); }

bool PeerMonitor::stop() {
  if (!thread_.joinable()) return !state_->detached;
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->stop = true;
  state_->cv.notify_all();
  const bool exited = state_->cv.wait_for(lock, std::chrono::duration<double>(std::max(1.0, 2 * state_->interval_s)),
                                          [&] { return state_->exited; });
  lock.unlock();
  if (exited) {
    thread_.join();
    return true;
  }
  thread_.detach();  // blocked in a store call; it owns its state through the shared_ptr
  state_->detached = true;
  return false;
}

void PeerMonitor::leave(bool wait_for_others) {
  if (!stop()) return;  // the store is not answering: nobody to check out with
  State& s = *state_;
  try {
    const std::string key = s.prefix + "left";
    s.client->add(key, 1);
    if (s.rank != 0 || !wait_for_others) return;
    const auto deadline = Clock::now() + std::chrono::duration<double>(std::min(s.timeout_s, 30.0));
    while (s.client->add(key, 0) < s.world_size && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  } catch (const std::exception&) {
    // a rank that is gone cannot check out; nothing to do about it at shutdown
  }
}

std::string PeerMonitor::diagnose() {
  State& s = *state_;
  const auto deadline = Clock::now() + std::chrono::duration<double>(s.stale_s + s.interval_s);
  std::vector<std::string> findings;
  std::vector<State::Peer> peers;
  while (true) {
    findings.clear();
    std::string store_error;
    bool store_stuck = false;
    double store_silent_s = 0;
    const auto now = Clock::now();
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      peers = s.peers;
      store_error = s.store_error;
      store_silent_s = s.in_call ? seconds_between(s.in_call_since, now) : 0;
      store_stuck = s.in_call && store_silent_s > s.stale_s;
    }
    const bool watched_long_enough = seconds_between(s.started, now) > s.stale_s;
    std::vector<bool> named(s.world_size, false);
    for (int p = 0; p < s.world_size; ++p) {
      if (p == s.rank) continue;
      const std::string host_note = p == 0 ? ", the store's host" : "";
      if (peers[p].info) {
        const ProcessState state = local_process_state(*peers[p].info);
        const std::string who = str("rank ", p, " (pid ", peers[p].info->pid, " on this machine", host_note, ")");
        if (state == ProcessState::kGone) {
          findings.push_back(who + " has exited");
          named[p] = true;
        } else if (state == ProcessState::kStopped) {
          findings.push_back(who + " is stopped (SIGSTOP, Ctrl-Z or a debugger)");
          named[p] = true;
        }
      }
      const double silent = seconds_between(peers[p].heartbeat_changed, now);
      if (!named[p] && watched_long_enough && store_error.empty() && !store_stuck && silent > s.stale_s) {
        // On another host: name it (a link down, a node powered off).
        static const std::string here = host_name();
        const bool elsewhere = peers[p].info && peers[p].info->host != here;
        findings.push_back(str("rank ", p, elsewhere ? " on host " + peers[p].info->host : std::string(),
                               p == 0 ? " (the store's host)" : "", " has sent no heartbeat for ", fmt_seconds(silent),
                               " s: it died, its process is frozen, or its machine is unreachable"));
        named[p] = true;
      }
    }
    if (s.rank != 0 && !named[0]) {
      if (!store_error.empty()) {
        findings.push_back(str("rank 0, which hosts the store at ", s.store_address,
                               ", is gone or unreachable (the store connection failed: ", store_error, ")"));
      } else if (store_stuck) {
        findings.push_back(str("rank 0, which hosts the store at ", s.store_address, ", has not answered for ",
                               fmt_seconds(store_silent_s), " s: it is stopped or hung"));
      }
    }
    if (!findings.empty() || Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }

  const std::int64_t mine = s.completed.load();
  std::string counts = "collectives completed, as of the last heartbeats: ";
  std::vector<int> behind;
  for (int p = 0; p < s.world_size; ++p) {
    const std::int64_t n = p == s.rank ? mine : peers[p].completed;
    counts += str(p == 0 ? "" : ", ", "rank ", p, " ", n, p == s.rank ? " (this rank)" : "");
    if (p != s.rank && n < mine) behind.push_back(p);
  }
  std::string out;
  if (!findings.empty()) {
    for (std::size_t i = 0; i < findings.size(); ++i) out += (i ? "; " : "") + findings[i];
  } else if (!behind.empty()) {
    out = "no rank looks dead (all send heartbeats), but rank";
    out += behind.size() > 1 ? "s " : " ";
    for (std::size_t i = 0; i < behind.size(); ++i) out += str(i ? ", " : "", behind[i]);
    out += " completed fewer collectives than this rank: stuck in other work, or issuing a different sequence of "
           "collectives";
  } else {
    out = "no rank looks dead (all send heartbeats) and none is behind: check the network between the ranks, or "
          "whether the ranks called this collective with different sizes";
  }
  return out + " (" + counts + ")";
}

}  // namespace ft::comm
