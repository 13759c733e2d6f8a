// Store on c10d's TCPStore: connection with a deadline, and c10d's errors turned into messages
// that say which address and port failed and what to check.
#include "comm/store.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <chrono>
#include <thread>

#include "comm/local_address.h"
#include "comm/store_impl.h"
#include "util/error.h"
#include "util/timer.h"
#include "util/torch_version.h"

namespace ft::comm {
namespace {

bool contains(const std::string& text, const char* part) { return text.find(part) != std::string::npos; }

std::string one_line(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  for (char& c : text) {
    if (c == '\n') c = ' ';
  }
  return text;
}

std::vector<std::uint8_t> bytes(const std::string& s) { return std::vector<std::uint8_t>(s.begin(), s.end()); }

void ignore_sigpipe_by_default() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) std::signal(SIGPIPE, SIG_IGN);
}

#if FT_TORCH_AT_LEAST(2, 0)
// A socket listening on host:port only (the address host resolves to, IPv4 first), for c10d to
// take over. c10d itself listens on every interface, and its store has no authentication: during
// a one-node run (MASTER_ADDR=127.0.0.1) anyone who reaches this host could read and write it.
int listen_only_on(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  FT_CHECK(rc == 0, "MASTER_ADDR=", host, " does not resolve: ", ::gai_strerror(rc));
  std::string problem = "no IPv4 or IPv6 address";
  int fd = -1;
  for (const addrinfo* a : ipv4_first(found)) {
    fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    const int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));  // as c10d does
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) break;
    problem = std::strerror(errno);
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(found);
  FT_CHECK(fd >= 0, "cannot listen on ", host, ":", port, ": ", problem);
  return fd;
}
#endif

c10::intrusive_ptr<c10d::TCPStore> open_tcp_store(const std::string& host, int port, bool server, double timeout_s) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(port);
  options.isServer = server;
#if FT_TORCH_AT_LEAST(2, 0)
  if (server) options.masterListenFd = listen_only_on(host, port);  // c10d owns and closes it
#endif
  options.waitWorkers = false;  // the rendezvous counts arrivals itself, to say who is missing
  options.timeout = to_milliseconds(timeout_s);
  return c10::make_intrusive<c10d::TCPStore>(host, options);
}

// PyTorch 2.x renumbered the store's commands (a VALIDATE greeting came first), so LibTorch 1.x's
// client sends its "add" to a 2.x store as a "get" and waits forever for the answer. torchrun's
// agent store is a 2.x one wherever torchrun still runs (torch 1.13's fails on Python 3.11).
void refuse_agent_store_on_old_libtorch(const RankEnv& env) {
#if !FT_TORCH_AT_LEAST(2, 0)
  FT_CHECK(!env.agent_store, "TORCHELASTIC_USE_AGENT_STORE=True: torchrun's agent hosts the rendezvous store at ",
           env.master_addr, ":", env.master_port, ", but this ft is built with LibTorch " TORCH_VERSION
           ", whose store client cannot talk to a PyTorch 2.x store (it would wait forever). Either let rank 0 host "
           "the store: TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --standalone (or --rdzv-backend c10d "
           "--rdzv-endpoint HOST:PORT) ...; or start the ranks with ft_launch; or build ft against PyTorch 2.x "
           "(scripts/build.sh --libtorch pip)");
#else
  (void)env;
#endif
}

std::string unreachable_message(const RankEnv& env, double timeout_s, const std::string& why) {
  if (env.agent_store) {
    return str("rank ", env.rank, " of ", env.world_size, " could not reach torchrun's agent store at ", env.master_addr,
               ":", env.master_port, " within ", timeout_s, " s (", why,
               "). TORCHELASTIC_USE_AGENT_STORE=True says torchrun's agent hosts it at MASTER_ADDR:MASTER_PORT; check "
               "that this process was started by torchrun (not with torchrun's variables copied by hand: then unset "
               "TORCHELASTIC_USE_AGENT_STORE so that rank 0 hosts the store) and that torchrun is still running");
  }
  return str("rank ", env.rank, " of ", env.world_size, " could not reach the rendezvous store at ", env.master_addr, ":",
             env.master_port, " within ", timeout_s, " s (", why,
             "), so it cannot tell how many of the ", env.world_size, " ranks arrived. Check that rank 0 is running and got "
             "past its start-up, that MASTER_ADDR=", env.master_addr,
             " is rank 0's host and reachable from here, that every rank uses MASTER_PORT=", env.master_port,
             ", and that no firewall blocks that port");
}

// Waits until host:port accepts a TCP connection. Returns "" then, else the last problem seen
// once the deadline has passed.
std::string wait_until_listening(const std::string& host, int port, std::chrono::steady_clock::time_point deadline) {
  std::string last = "nothing listens there";
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  while (true) {
    addrinfo* found = nullptr;
    const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
    if (rc != 0) {
      last = str("MASTER_ADDR=", host, " does not resolve: ", ::gai_strerror(rc));
    } else {
      for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
        const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        int err = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
        if (err == EINPROGRESS) {
          const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
          pollfd p{fd, POLLOUT, 0};
          if (::poll(&p, 1, static_cast<int>(std::clamp<std::int64_t>(left.count(), 1, 1000))) == 1) {
            socklen_t len = sizeof(err);
            ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
          } else {
            err = ETIMEDOUT;
          }
        }
        ::close(fd);
        if (err == 0) {
          ::freeaddrinfo(found);
          return "";
        }
        last = err == ECONNREFUSED ? "connection refused: nothing listens there yet"
                                   : str(std::strerror(err), err == ETIMEDOUT ? ": no answer (a firewall, or the wrong host?)" : "");
      }
      ::freeaddrinfo(found);
    }
    if (std::chrono::steady_clock::now() + std::chrono::milliseconds(50) >= deadline) return last;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Store::~Store() = default;

std::shared_ptr<Store> Store::connect(const RankEnv& env, double timeout_s) {
  FT_CHECK(env.master_port > 0, "no MASTER_PORT to meet at: rank ", env.rank, " of ", env.world_size,
           " needs MASTER_ADDR:MASTER_PORT (set by ft_launch or torchrun)");
  refuse_agent_store_on_old_libtorch(env);
  ignore_sigpipe_by_default();
  auto impl = std::make_unique<Impl>();
  impl->host = env.master_addr;
  impl->port = env.master_port;
  impl->agent_store = env.agent_store;
  impl->server = env.rank == 0 && !env.agent_store;
  impl->prefix = env.store_prefix();
  impl->timeout_s = timeout_s;
  const std::string where = str(env.master_addr, ":", env.master_port);
  const auto deadline = std::chrono::steady_clock::now() + to_milliseconds(timeout_s);
  if (!impl->server) {
    // Wait for rank 0's (or torchrun's agent's) port quietly ourselves: c10d's client gives up early on short timeouts
    // and logs every failed attempt.
    const std::string problem = wait_until_listening(impl->host, impl->port, deadline);
    if (!problem.empty()) throw Error(unreachable_message(env, timeout_s, problem));
  }
  try {
    const double left = std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
    impl->tcp = open_tcp_store(impl->host, impl->port, impl->server, std::max(left, 1.0));
    impl->tcp->setTimeout(to_milliseconds(timeout_s));
  } catch (const std::exception& e) {
    const std::string why = one_line(short_message(e));
    if (impl->server && (contains(why, "in use") || contains(why, "errno: 98"))) {
      throw Error(str("rank 0 cannot host the rendezvous store on port ", env.master_port,
                      ": the port is already in use (another run, or another program, listens on it). Pick another "
                      "MASTER_PORT (ft_launch picks a free one when --master_port is not given), or stop the "
                      "process that holds it (ss -ltnp | grep :",
                      env.master_port, "). [", why, "]"));
    }
    if (impl->server) {
      throw Error(str("rank 0 cannot host the rendezvous store at ", where, ": ", why,
                      ". Check that MASTER_ADDR=", env.master_addr, " names this machine and that port ",
                      env.master_port, " is free and allowed"));
    }
    throw Error(unreachable_message(env, timeout_s, why));
  }
  return std::shared_ptr<Store>(new Store(std::move(impl)));
}

std::shared_ptr<Store> Store::new_client() const {
  auto impl = std::make_unique<Impl>(*impl_);
  impl->server = false;
  try {
    impl->tcp = open_tcp_store(impl->host, impl->port, false, impl->timeout_s);
  } catch (const std::exception& e) {
    throw Error(str("a second connection to the store at ", address(), " failed: ", one_line(short_message(e))));
  }
  return std::shared_ptr<Store>(new Store(std::move(impl)));
}

#define FT_STORE_CALL(what, call)                                                                        \
  try {                                                                                                  \
    call;                                                                                                \
  } catch (const std::exception& e) {                                                                    \
    throw Error(str("the rendezvous store at ", address(), " (hosted by ", hosted_by(), ") failed during ", what, \
                    ": ", one_line(short_message(e)),                                                    \
                    is_server() ? "" : str(". ", hosted_by(), " may have exited or stopped: look at its output"))); \
  }

void Store::set(const std::string& key, const std::string& value) {
  FT_STORE_CALL("set " + key, impl_->tcp->set(impl_->key(key), bytes(value)));
}

std::string Store::get(const std::string& key) {
  std::vector<std::uint8_t> value;
  FT_STORE_CALL("get " + key, value = impl_->tcp->get(impl_->key(key)));
  return std::string(value.begin(), value.end());
}

std::int64_t Store::add(const std::string& key, std::int64_t delta) {
  std::int64_t value = 0;
  FT_STORE_CALL("add " + key, value = impl_->tcp->add(impl_->key(key), delta));
  return value;
}

bool Store::check(const std::string& key) {
  bool present = false;
  FT_STORE_CALL("check " + key, present = impl_->tcp->check({impl_->key(key)}));
  return present;
}

bool Store::wait_for(const std::vector<std::string>& keys, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + to_milliseconds(timeout_s);
  std::vector<std::string> prefixed;
  for (const std::string& k : keys) prefixed.push_back(impl_->key(k));
  auto pause = std::chrono::milliseconds(1);
  while (true) {
    bool all = false;
    FT_STORE_CALL("wait", all = impl_->tcp->check(prefixed));
    if (all) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

#undef FT_STORE_CALL

const std::string& Store::host() const { return impl_->host; }
int Store::port() const { return impl_->port; }
std::string Store::address() const { return str(impl_->host, ":", impl_->port); }
bool Store::is_server() const { return impl_->server; }
std::string Store::hosted_by() const { return impl_->agent_store ? "torchrun's agent" : "rank 0"; }
double Store::timeout_s() const { return impl_->timeout_s; }

}  // namespace ft::comm
