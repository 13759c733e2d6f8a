// Which local address a rank advertises to other hosts (comm/local_address.h), and where rank 0's
// rendezvous store listens. The multi-host versions, between network namespaces, are in
// tests/netns/test_multinode.py.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "comm/local_address.h"
#include "comm/store.h"
#include "test_support.h"
#include "util/error.h"
#include "util/torch_version.h"

namespace ft::comm {
namespace {

TEST(LocalAddress, LoopbackAddresses) {
  EXPECT_TRUE(is_loopback_address("127.0.0.1"));
  EXPECT_TRUE(is_loopback_address("127.0.1.1"));  // Debian's /etc/hosts entry for the host name
  EXPECT_TRUE(is_loopback_address("::1"));
  EXPECT_TRUE(is_loopback_address("::ffff:127.0.0.1"));
  EXPECT_FALSE(is_loopback_address("10.0.0.1"));
  EXPECT_FALSE(is_loopback_address("fd00::1"));
  EXPECT_FALSE(is_loopback_address("localhost"));  // numeric only
}

TEST(LocalAddress, TowardsThisHostIsLoopback) {
  const LocalAddress local = local_address_towards("127.0.0.1");
  EXPECT_EQ(local.address, "127.0.0.1");
  EXPECT_EQ(local.interface, "lo");
  EXPECT_TRUE(local.loopback);
}

TEST(LocalAddress, UnresolvableHostIsAnErrorNamingIt) {
  try {
    local_address_towards("no-such-host.invalid");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MASTER_ADDR=no-such-host.invalid"), std::string::npos) << e.what();
  }
}

TEST(LocalAddress, LoopbackTowardsMasterIsAnErrorAcrossHosts) {
  RankEnv env;
  env.rank = 2;
  env.world_size = 4;
  env.local_world_size = 2;
  env.master_addr = "127.0.0.1";
  try {
    address_for_other_hosts(env, "GLOO_SOCKET_IFNAME");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("loopback address 127.0.0.1"), std::string::npos) << what;
    EXPECT_NE(what.find("GLOO_SOCKET_IFNAME"), std::string::npos) << what;
    EXPECT_NE(what.find("MASTER_ADDR"), std::string::npos) << what;
  }
}

// The local addresses of the TCP sockets listening on `port`, as /proc/net/tcp{,6} show them
// (hex: "0100007F" is 127.0.0.1, "00000000" every IPv4 interface).
std::vector<std::string> listening_addresses(int port) {
  std::vector<std::string> found;
  char wanted[8];
  std::snprintf(wanted, sizeof(wanted), "%04X", port);
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      fields >> slot >> local >> remote >> state;
      const auto colon = local.find(':');
      if (state == "0A" && colon != std::string::npos && local.substr(colon + 1) == wanted)
        found.push_back(local.substr(0, colon));
    }
  }
  return found;
}

TEST(StoreBinding, OneNodeStoreListensWhereMasterAddrIs) {
  RankEnv env;
  env.world_size = 2;
  env.local_world_size = 2;
  env.master_addr = "127.0.0.1";
  env.master_port = test::free_port();
  const auto store = Store::connect(env, 10);
  const std::vector<std::string> addresses = listening_addresses(env.master_port);
  ASSERT_FALSE(addresses.empty()) << "nothing listens on port " << env.master_port;
#if FT_TORCH_AT_LEAST(2, 0)
  // 127.0.0.1 only: nobody on another host can reach it.
  EXPECT_EQ(addresses, std::vector<std::string>{"0100007F"});
#else
  // LibTorch 1.13's store listens on every interface (its options take no bound socket): the
  // README says what to firewall. This pins that down, so that a change shows here.
  for (const std::string& a : addresses) EXPECT_TRUE(a.find_first_not_of('0') == std::string::npos) << a;
#endif
}

}  // namespace
}  // namespace ft::comm
