// The key-value store every rank reaches during a run: c10d's TCPStore, hosted by rank 0 on
// MASTER_PORT. It carries the rendezvous, the config check, Gloo's and NCCL's connection setup,
// and the peers' heartbeats. This header is light on purpose (pimpl): c10d stays in lib/comm's
// .cpp files.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/rank_env.h"

namespace ft::comm {

class Store {
 public:
  // Rank 0 listens on MASTER_PORT and connects to itself: with LibTorch 2.x only at the address
  // MASTER_ADDR resolves to (127.0.0.1 for a one-node run), with 1.13 on every interface (its
  // c10d store cannot take a socket bound elsewhere, and has no authentication); the other ranks
  // connect to MASTER_ADDR:MASTER_PORT, retrying until timeout_s. Under torchrun's agent store
  // (env.agent_store) every rank connects as a client. Keys are put under env.store_prefix().
  // Throws ft::Error naming the address, the port and what to check (port in use on rank 0,
  // MASTER_ADDR, firewall, torchrun's agent).
  // Ignores SIGPIPE when it is at its default, so that a peer that dies cannot kill this process
  // through a socket write.
  static std::shared_ptr<Store> connect(const RankEnv& env, double timeout_s);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Another connection to the same store. One connection serializes its calls, so a background
  // thread uses its own.
  std::shared_ptr<Store> new_client() const;

  void set(const std::string& key, const std::string& value);
  // The value of a key that exists (check it first): a missing key waits up to the timeout.
  std::string get(const std::string& key);
  // Adds delta and returns the new value (add(key, 0) reads a counter; missing counts as 0).
  std::int64_t add(const std::string& key, std::int64_t delta);
  bool check(const std::string& key);
  // Polls until every key exists; false when timeout_s passes first.
  bool wait_for(const std::vector<std::string>& keys, double timeout_s);

  const std::string& host() const;
  int port() const;
  std::string address() const;  // "host:port"
  bool is_server() const;       // this process hosts the store (rank 0)
  // "rank 0" or "torchrun's agent": who hosts the store, for messages.
  std::string hosted_by() const;
  double timeout_s() const;

  struct Impl;
  Impl& impl() const { return *impl_; }

 private:
  explicit Store(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ft::comm
