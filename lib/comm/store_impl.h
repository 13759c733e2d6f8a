// Internal to lib/comm: what a Store is made of, for the .cpp files that hand it to c10d
// (ProcessGroupGloo) or use it directly. Not for code outside lib/comm: it pulls in c10d.
#pragma once

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <exception>
#include <string>

#include "comm/store.h"

namespace ft::comm {

// The message of an exception from c10d or Gloo, without c10's C++ backtrace.
inline std::string short_message(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) return c10_error->what_without_backtrace();
  return e.what();
}

struct Store::Impl {
  c10::intrusive_ptr<c10d::TCPStore> tcp;
  std::string host;
  int port = 0;
  bool server = false;
  bool agent_store = false;  // torchrun's agent hosts it (RankEnv::agent_store)
  std::string prefix;        // RankEnv::store_prefix(), put before every key
  double timeout_s = 300;

  std::string key(const std::string& name) const { return prefix + name; }
};

}  // namespace ft::comm
