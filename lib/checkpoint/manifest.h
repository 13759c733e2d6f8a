// manifest.json: what a checkpoint holds, written last (its presence marks the checkpoint
// complete). Every file with its size and CRC-32, the world size and strategy that saved it, a
// hash of the resolved config, and each rank's optimizer shard as pieces of the named parameters
// (parallel::ShardPiece), so that a checkpoint can be read on any world size.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/shard_layout.h"
#include "util/json.h"

namespace ft::checkpoint {

struct FileEntry {
  std::string path;  // relative to the checkpoint folder
  std::uint64_t size = 0;
  std::string crc32;  // 8 hex digits

  Json to_json() const;
  // Errors name `source`, `where` (e.g. "files[3]: ") and the key; the path must stay inside
  // the checkpoint folder.
  static FileEntry from_json(const Json& json, const std::string& source, const std::string& where);
};

// One rank's shard file: "master", "exp_avg" and "exp_avg_sq" (fp32, [numel]) laid out as the
// pieces say (with replicated DDP state: the rank's 1/W of it), and its RNG state.
struct RankShard {
  int rank = 0;
  std::string file;
  std::int64_t numel = 0;
  std::vector<parallel::ShardPiece> pieces;

  Json to_json() const;  // pieces as [name, param_offset, length, shard_offset]
  static RankShard from_json(const Json& json, const std::string& source, const std::string& where);
};

struct Manifest {
  static constexpr int kFormatVersion = 1;
  int format_version = kFormatVersion;
  std::int64_t step = 0;
  int world_size = 1;
  std::string strategy;
  std::string config_hash;
  std::vector<FileEntry> files;
  std::vector<RankShard> ranks;  // by rank, world_size entries

  Json to_json() const;
  // Checks types and consistency; errors name `source` and the key.
  static Manifest from_json(const Json& json, const std::string& source);
  // The entry of a file, or nullptr.
  const FileEntry* find(const std::string& path) const;
};

// Size and CRC-32 of `dir/relative`.
FileEntry describe_file(const std::string& dir, const std::string& relative);
// Throws ft::Error naming the file unless its size and CRC-32 match the manifest's.
void verify_file(const std::string& dir, const Manifest& manifest, const std::string& relative);

Manifest read_manifest(const std::string& dir);
// Atomic, fsynced.
void write_manifest(const std::string& dir, const Manifest& manifest);

}  // namespace ft::checkpoint
