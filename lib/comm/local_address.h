// Which of this host's addresses the other nodes of a run can reach. Gloo and NCCL each advertise
// one address to their peers; left alone they take what the host name resolves to (on Debian,
// 127.0.1.1) or the first interface up, and a peer on another host then fails to connect with a
// message about something else. The kernel's routing table already knows the answer: the local
// address it would use to reach MASTER_ADDR is on the network the nodes share.
#pragma once

#include <string>
#include <vector>

#include "comm/rank_env.h"

struct addrinfo;

namespace ft::comm {

struct LocalAddress {
  std::string address;    // numeric: "10.0.0.2", "fd00::2"
  std::string interface;  // the interface that holds it: "eth0" (empty when none does)
  bool loopback = false;  // 127.0.0.0/8 or ::1: reachable from this host only
};

// The local address this host would send from to reach `host` (a name or a numeric address; IPv4
// answers first), found without sending anything (a UDP socket's connect only asks the routing
// table). For an address of this host itself, that address. Throws ft::Error naming `host` when it
// does not resolve or no route leads there.
LocalAddress local_address_towards(const std::string& host);

// The address this rank advertises to peers on other hosts (a run whose ranks span hosts:
// local_world_size < world_size): the one towards MASTER_ADDR. Throws ft::Error when that is a
// loopback address (MASTER_ADDR is 127.0.0.1, localhost, or a host name that resolves to 127.0.1.1
// as Debian's /etc/hosts has it), naming the address and `variable`, the one that picks an interface
// instead (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME).
LocalAddress address_for_other_hosts(const RankEnv& env, const char* variable);

// The first address of the named interface (IPv4 first), or "" when it has none.
std::string interface_address(const std::string& interface);

// The entries of a getaddrinfo list, IPv4 ones first (the order ft binds and connects in).
std::vector<const addrinfo*> ipv4_first(const addrinfo* list);

// True for a numeric loopback address (127.x.y.z, ::1, ::ffff:127.x.y.z).
bool is_loopback_address(const std::string& numeric);

}  // namespace ft::comm
