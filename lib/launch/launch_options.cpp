#include "launch/launch_options.h"

#include <cerrno>
#include <cstdlib>

namespace ft::launch {

const char* const kUsage =
    "usage: ft_launch [--nproc_per_node N] [--nnodes K --node_rank I --master_addr A] [--master_port P]\n"
    "                 [--grace-period SECONDS] [--stop-grace-period SECONDS] [--max-restarts N]\n"
    "                 [--join-timeout SECONDS] PROGRAM [ARGS...]\n"
    "Starts N processes of PROGRAM with RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and\n"
    "MASTER_PORT set, prefixes their output with [rank R], and stops all of them when one fails.\n";

namespace {

int parse_int(const std::string& flag, const std::string& value, int min, int max) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno != 0 || v < min || v > max) {
    throw UsageError(str(flag, ": expected an integer in ", min, "..", max, ", got \"", value, "\""));
  }
  return static_cast<int>(v);
}

double parse_seconds(const std::string& flag, const std::string& value) {
  char* end = nullptr;
  const double seconds = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0' || !(seconds >= 0)) {
    throw UsageError("--" + flag.substr(2) + ": expected seconds >= 0, got \"" + value + "\"");
  }
  return seconds;
}

// One flag with its value; `flag` is spelled with underscores (--nproc_per_node).
void set_option(Options& o, const std::string& flag, const std::string& value) {
  if (flag == "--nproc_per_node") {
    o.nproc_per_node = parse_int(flag, value, 1, 4096);
  } else if (flag == "--nnodes") {
    o.nnodes = parse_int(flag, value, 1, 65536);
  } else if (flag == "--node_rank") {
    o.node_rank = parse_int(flag, value, 0, 65535);
  } else if (flag == "--master_addr") {
    o.master_addr = value;
  } else if (flag == "--master_port") {
    o.master_port = parse_int(flag, value, 1, 65535);
  } else if (flag == "--max_restarts") {
    o.max_restarts = parse_int(flag, value, 0, 1000000);
  } else if (flag == "--join_timeout") {
    o.join_timeout_s = parse_seconds(flag, value);
  } else if (flag == "--grace_period") {
    o.grace_s = parse_seconds(flag, value);
  } else if (flag == "--stop_grace_period") {
    o.stop_grace_s = parse_seconds(flag, value);
  } else {
    throw UsageError("unknown option " + flag);
  }
}

// The combinations no single flag can reject.
void check_combination(const Options& o) {
  if (o.command.empty()) throw UsageError("no PROGRAM to launch");
  if (o.node_rank >= o.nnodes) {
    throw UsageError(str("--node_rank ", o.node_rank, " is out of range for --nnodes ", o.nnodes));
  }
  if (o.nnodes > 1 && (o.master_addr.empty() || o.master_port == 0)) {
    throw UsageError("--nnodes > 1 needs --master_addr (node rank 0's host) and --master_port, the same on every node");
  }
}

}  // namespace

Options parse_options(int argc, const char* const* argv) {
  Options o;
  int i = 1;
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "-h" || arg == "--help") {
      o.help = true;
      return o;
    }
    if (arg.rfind("--", 0) != 0) break;  // PROGRAM: everything from here on is its command line
    std::string value;
    const std::size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else {
      if (i + 1 >= argc) throw UsageError(arg + " needs a value");
      value = argv[++i];
    }
    for (std::size_t k = 2; k < arg.size(); ++k) {
      if (arg[k] == '-') arg[k] = '_';  // --nproc-per-node == --nproc_per_node
    }
    set_option(o, arg, value);
  }
  for (; i < argc; ++i) o.command.push_back(argv[i]);
  check_combination(o);
  if (o.master_addr.empty()) o.master_addr = "127.0.0.1";
  return o;
}

}  // namespace ft::launch
