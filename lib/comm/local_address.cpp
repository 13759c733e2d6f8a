#include "comm/local_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "util/error.h"

namespace ft::comm {
namespace {

std::string numeric(const sockaddr* a) {
  char text[INET6_ADDRSTRLEN] = {};
  const void* raw = a->sa_family == AF_INET ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(a)->sin_addr)
                                            : static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr);
  return ::inet_ntop(a->sa_family, raw, text, sizeof(text)) != nullptr ? text : "";
}

struct InterfaceAddress {
  std::string interface;
  std::string address;  // numeric
};

// Every IPv4 and IPv6 address of this host's interfaces, in getifaddrs' order.
std::vector<InterfaceAddress> interface_addresses() {
  std::vector<InterfaceAddress> found;
  ifaddrs* all = nullptr;
  if (::getifaddrs(&all) != 0) return found;
  for (ifaddrs* i = all; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)) continue;
    found.push_back({i->ifa_name, numeric(i->ifa_addr)});
  }
  ::freeifaddrs(all);
  return found;
}

// The interface that holds `address` (numeric), or "".
std::string interface_holding(const std::string& address) {
  for (const InterfaceAddress& a : interface_addresses())
    if (a.address == address) return a.interface;
  return "";
}

}  // namespace

std::vector<const addrinfo*> ipv4_first(const addrinfo* list) {
  std::vector<const addrinfo*> order;
  for (int family : {AF_INET, AF_INET6})
    for (const addrinfo* a = list; a != nullptr; a = a->ai_next)
      if (a->ai_family == family) order.push_back(a);
  return order;
}

std::string interface_address(const std::string& interface) {
  std::string v6;
  for (const InterfaceAddress& a : interface_addresses()) {
    if (a.interface != interface) continue;
    if (a.address.find(':') == std::string::npos) return a.address;  // IPv4 first
    if (v6.empty()) v6 = a.address;
  }
  return v6;
}

bool is_loopback_address(const std::string& text) {
  in_addr v4{};
  if (::inet_pton(AF_INET, text.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, text.c_str(), &v6) != 1) return false;
  if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
  return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
}

LocalAddress local_address_towards(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), "9", &hints, &found);  // any port: nothing is sent
  FT_CHECK(rc == 0, "cannot tell which local address reaches MASTER_ADDR=", host, ": it does not resolve (",
           ::gai_strerror(rc), ")");
  std::string problem = "no IPv4 or IPv6 address";
  for (const addrinfo* a : ipv4_first(found)) {  // as the store and Gloo try them
    const int fd = ::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t length = sizeof(local);
    // A UDP connect sends nothing: it asks the routing table for the source address.
    const bool ok = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
                    ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0;
    if (!ok) problem = std::strerror(errno);
    ::close(fd);
    if (!ok) continue;
    LocalAddress result;
    result.address = numeric(reinterpret_cast<const sockaddr*>(&local));
    result.interface = interface_holding(result.address);
    result.loopback = is_loopback_address(result.address);
    ::freeaddrinfo(found);
    return result;
  }
  ::freeaddrinfo(found);
  throw Error(str("cannot tell which local address reaches MASTER_ADDR=", host, ": ", problem,
                  " (no route to it from this host?)"));
}

LocalAddress address_for_other_hosts(const RankEnv& env, const char* variable) {
  const LocalAddress local = local_address_towards(env.master_addr);
  FT_CHECK(!local.loopback, "rank ", env.rank, " of ", env.world_size, ": the ranks span several hosts (",
           env.local_world_size, " of ", env.world_size, " on this one), but this host reaches MASTER_ADDR=",
           env.master_addr, " through its loopback address ", local.address,
           ", which ranks on the other hosts cannot connect to. Set MASTER_ADDR (ft_launch --master_addr) to node 0's "
           "address on the network the nodes share, or ", variable, " to this host's interface on that network");
  return local;
}

}  // namespace ft::comm
