#include "launch/node_rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <sstream>
#include <vector>

#include "launch/free_port.h"
#include "launch/rank_output.h"

namespace ft::launch {
namespace {

using Clock = std::chrono::steady_clock;

int ms_until(Clock::time_point deadline, int at_most_ms) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::max<long long>(0, std::min<long long>(left, at_most_ms)));
}

// The first signal other than SIGCHLD among those waiting in the pipe, 0 when none.
int read_signal(int signal_fd) {
  unsigned char signals[64];
  const ssize_t n = ::read(signal_fd, signals, sizeof(signals));
  for (ssize_t k = 0; k < n; ++k) {
    if (signals[k] != SIGCHLD) return signals[k];
  }
  return 0;
}

// Waits up to ms for fd to be ready for `events` or a signal; returns the signal (0: none).
int wait_for(int fd, short events, int signal_fd, int ms, bool* ready) {
  pollfd fds[2] = {{signal_fd, POLLIN, 0}, {fd, events, 0}};
  *ready = false;
  if (::poll(fds, fd >= 0 ? 2 : 1, ms) <= 0) return 0;
  if (fds[0].revents & POLLIN) {
    if (const int signo = read_signal(signal_fd)) return signo;
  }
  *ready = fd >= 0 && fds[1].revents != 0;
  return 0;
}

struct AddrInfoDeleter {
  void operator()(addrinfo* a) const { ::freeaddrinfo(a); }
};
using AddrInfoList = std::unique_ptr<addrinfo, AddrInfoDeleter>;

// host:port's addresses, IPv4 first (a host name may resolve to both; c10d's store and the
// ranks' own lookup prefer IPv4 too).
std::vector<const addrinfo*> resolve(const std::string& host, int port, AddrInfoList& keep) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0) throw RendezvousError(str("--master_addr ", host, " does not resolve: ", ::gai_strerror(rc)));
  keep.reset(found);
  std::vector<const addrinfo*> out;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) out.push_back(a);
  }
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET6) out.push_back(a);
  }
  return out;
}

bool is_loopback(const addrinfo* a) {
  if (a->ai_family == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr.s_addr) >> 24) == 127;
  }
  return a->ai_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr);
}

std::string address_of(const sockaddr* a) {
  char text[INET6_ADDRSTRLEN] = "?";
  if (a->sa_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a)->sin_addr, text, sizeof(text));
  } else if (a->sa_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr, text, sizeof(text));
  }
  return text;
}

// A line is short: one blocking send (a peer gone meanwhile: dropped, without SIGPIPE).
void send_line(int fd, const std::string& line) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::size_t sent = 0;
  while (sent < line.size()) {
    const ssize_t n = ::send(fd, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    sent += static_cast<std::size_t>(n);
  }
}

// Reads what is there into `buffer`; false at the end of the stream or on an error.
bool read_into(int fd, std::string& buffer) {
  char chunk[512];
  const ssize_t n = ::read(fd, chunk, sizeof(chunk));
  if (n > 0) buffer.append(chunk, static_cast<std::size_t>(n));
  return n > 0 || (n < 0 && (errno == EINTR || errno == EAGAIN));
}

// "key=value" of a line of words, -1 when absent or not a number.
int field(const std::string& line, const std::string& key) {
  std::istringstream words(line);
  std::string word;
  while (words >> word) {
    if (word.rfind(key + "=", 0) != 0) continue;
    char* end = nullptr;
    const long v = std::strtol(word.c_str() + key.size() + 1, &end, 10);
    if (*end == '\0' && v >= 0 && v <= 1 << 30) return static_cast<int>(v);
  }
  return -1;
}

// One launcher that connected to node 0 and has not yet been told to go.
struct Guest {
  int fd = -1;
  std::string from;  // its address
  std::string buffer;
  int node = -1;     // once its join line came
};

}  // namespace

std::string join_line(const Options& o) {
  return str("join node_rank=", o.node_rank, " nnodes=", o.nnodes, " nproc_per_node=", o.nproc_per_node, "\n");
}

int node_of_join_line(const std::string& line, const Options& o) {
  if (line.rfind("join ", 0) != 0) throw RendezvousError(str("not an ft_launch join line: \"", line, "\""));
  const int node = field(line, "node_rank"), nnodes = field(line, "nnodes"), nproc = field(line, "nproc_per_node");
  if (nnodes != o.nnodes) throw RendezvousError(str("--nnodes ", nnodes, " there, ", o.nnodes, " on node 0"));
  if (nproc != o.nproc_per_node) {
    throw RendezvousError(str("--nproc_per_node ", nproc, " there, ", o.nproc_per_node, " on node 0"));
  }
  if (node < 1 || node >= o.nnodes) {
    throw RendezvousError(str("--node_rank ", node, ": expected 1..", o.nnodes - 1, " (0 is the node hosting this)"));
  }
  return node;
}

NodeRendezvous::NodeRendezvous(const Options& o) : options_(o) {
  if (o.node_rank != 0) return;
  AddrInfoList keep;
  std::string problem = "no IPv4 or IPv6 address";
  for (const addrinfo* a : resolve(o.master_addr, o.master_port, keep)) {
    const int fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    const int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) {
      listen_fd_ = fd;
      // All "nodes" on this host can meet there (the ranks refuse such a world on their own).
      if (is_loopback(a)) {
        write_all(2, str("ft_launch: warning: --master_addr ", o.master_addr, " is the loopback address ",
                         address_of(a->ai_addr), " here: launchers on other hosts cannot reach it\n"));
      }
      return;
    }
    problem = str(address_of(a->ai_addr), ": ", std::strerror(errno));
    ::close(fd);
  }
  throw RendezvousError(str("node 0's launcher cannot listen for the other nodes' launchers at ", endpoint(), ": ",
                            problem, " (--master_addr must be this node's address as the other nodes reach it)"));
}

NodeRendezvous::~NodeRendezvous() {
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

std::string NodeRendezvous::endpoint() const { return str(options_.master_addr, ":", options_.master_port); }

Meeting NodeRendezvous::meet(int restart, int signal_fd) {
  return options_.node_rank == 0 ? host(restart, signal_fd) : join(signal_fd);
}

Meeting NodeRendezvous::host(int restart, int signal_fd) {
  const Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                         std::chrono::duration<double>(options_.join_timeout_s));
  std::vector<Guest> guests;
  auto close_all = [&] {
    for (Guest& g : guests) ::close(g.fd);
    guests.clear();
  };
  auto joined = [&] {
    return std::count_if(guests.begin(), guests.end(), [](const Guest& g) { return g.node >= 0; });
  };
  while (joined() < options_.nnodes - 1) {
    if (Clock::now() >= deadline) {
      std::vector<bool> here(options_.nnodes, false);
      for (const Guest& g : guests) {
        if (g.node >= 0) here[g.node] = true;
      }
      std::string missing;
      for (int n = 1; n < options_.nnodes; ++n) {
        if (!here[n]) missing += (missing.empty() ? "" : ", ") + std::to_string(n);
      }
      close_all();
      throw RendezvousError(str("the launchers of nodes ", missing, " did not come to ", endpoint(), " within ",
                                options_.join_timeout_s, " s (--join-timeout)"));
    }
    std::vector<pollfd> fds{{signal_fd, POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    for (const Guest& g : guests) fds.push_back(pollfd{g.fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), ms_until(deadline, 1000)) <= 0) continue;
    if (fds[0].revents & POLLIN) {
      if (const int signo = read_signal(signal_fd)) {
        close_all();
        return Meeting{0, 0, signo};
      }
    }
    std::vector<Guest> staying;
    for (std::size_t k = 0; k < guests.size(); ++k) {
      Guest& g = guests[k];
      bool keep = true;
      if (fds[k + 2].revents != 0) {
        keep = read_into(g.fd, g.buffer);  // a launcher that gave up: gone, and no longer counted
        const std::size_t eol = g.buffer.find('\n');
        if (keep && g.node < 0 && eol != std::string::npos) {
          try {
            g.node = node_of_join_line(g.buffer.substr(0, eol), options_);
          } catch (const RendezvousError& e) {
            write_all(2, str("ft_launch: refused the launcher at ", g.from, ": ", e.what(), "\n"));
            send_line(g.fd, str("error ", e.what(), "\n"));
            keep = false;
          }
        }
      }
      if (keep) {
        staying.push_back(g);
      } else {
        ::close(g.fd);
      }
    }
    guests.swap(staying);
    // A node that joins again (its launcher reconnected) replaces its older connection.
    for (std::size_t k = 0; k < guests.size(); ++k) {
      for (std::size_t later = k + 1; later < guests.size(); ++later) {
        if (guests[k].node >= 0 && guests[k].node == guests[later].node) {
          ::close(guests[k].fd);
          guests[k].fd = -1;
        }
      }
    }
    guests.erase(std::remove_if(guests.begin(), guests.end(), [](const Guest& g) { return g.fd < 0; }), guests.end());
    if (fds[1].revents & POLLIN) {
      sockaddr_storage from{};
      socklen_t len = sizeof(from);
      const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0) guests.push_back(Guest{fd, address_of(reinterpret_cast<sockaddr*>(&from)), {}, -1});
    }
  }
  // A new port for every start: the store of the last one may linger, and no rank of it reaches
  // this one's.
  const int port = free_port();
  for (Guest& g : guests) send_line(g.fd, str("go restart=", restart, " port=", port, "\n"));
  close_all();
  return Meeting{restart, port, 0};
}

Meeting NodeRendezvous::join(int signal_fd) {
  const Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                         std::chrono::duration<double>(options_.join_timeout_s));
  std::string last_problem = "no answer";
  while (Clock::now() < deadline) {
    AddrInfoList keep;
    int fd = -1;
    for (const addrinfo* a : resolve(options_.master_addr, options_.master_port, keep)) {
      fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      if (fd < 0) continue;
      if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) break;
      if (errno == EINPROGRESS) {
        bool ready = false;
        if (const int signo = wait_for(fd, POLLOUT, signal_fd, ms_until(deadline, 5000), &ready)) {
          ::close(fd);
          return Meeting{0, 0, signo};
        }
        int error = ready ? 0 : ETIMEDOUT;
        socklen_t len = sizeof(error);
        if (ready) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
        if (error == 0) break;
        errno = error;
      }
      last_problem = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
    if (fd >= 0) {
      send_line(fd, join_line(options_));
      std::string answer;
      bool open = true;
      while (open && answer.find('\n') == std::string::npos && Clock::now() < deadline) {
        bool ready = false;
        if (const int signo = wait_for(fd, POLLIN, signal_fd, ms_until(deadline, 1000), &ready)) {
          ::close(fd);
          return Meeting{0, 0, signo};
        }
        if (ready) open = read_into(fd, answer);
      }
      ::close(fd);
      const std::string line = answer.substr(0, answer.find('\n'));
      if (line.rfind("go ", 0) == 0 && field(line, "restart") >= 0 && field(line, "port") > 0) {
        return Meeting{field(line, "restart"), field(line, "port"), 0};
      }
      if (line.rfind("error ", 0) == 0) {
        throw RendezvousError(str("node 0's launcher at ", endpoint(), " refused this node: ", line.substr(6)));
      }
      last_problem = open ? "no answer yet" : "node 0's launcher closed the connection";
    }
    // Not there yet (node 0 starting, its link down): try again in a second.
    bool ready = false;
    if (const int signo = wait_for(-1, 0, signal_fd, ms_until(deadline, 1000), &ready)) return Meeting{0, 0, signo};
  }
  throw RendezvousError(str("could not join node 0's launcher at ", endpoint(), " within ", options_.join_timeout_s,
                            " s (--join-timeout): ", last_problem));
}

}  // namespace ft::launch
