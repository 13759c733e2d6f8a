#include "checkpoint/manifest.h"

#include "checkpoint/checkpoint_folder.h"
#include "util/error.h"
#include "util/file_util.h"
#include "util/hash.h"

namespace ft::checkpoint {
namespace {

// j[key] with the expected JSON type, or an error naming the file and the key.
const Json& field(const Json& j, const char* key, Json::value_t type, const std::string& source,
                  const std::string& where) {
  FT_CHECK(j.is_object() && j.contains(key), source, ": ", where, "\"", key, "\" is missing");
  const Json& v = j[key];
  const bool ok = type == Json::value_t::number_integer
                      ? (v.is_number_integer())
                      : type == Json::value_t::string ? v.is_string()
                      : type == Json::value_t::array  ? v.is_array()
                                                      : v.type() == type;
  FT_CHECK(ok, source, ": ", where, "\"", key, "\" has the wrong type (", v.type_name(), ")");
  return v;
}

std::int64_t int_field(const Json& j, const char* key, const std::string& source, const std::string& where,
                       std::int64_t min) {
  const std::int64_t v = field(j, key, Json::value_t::number_integer, source, where).get<std::int64_t>();
  FT_CHECK(v >= min, source, ": ", where, "\"", key, "\" is ", v, ", expected >= ", min);
  return v;
}

}  // namespace

Json FileEntry::to_json() const { return Json{{"path", path}, {"size", size}, {"crc32", crc32}}; }

FileEntry FileEntry::from_json(const Json& j, const std::string& source, const std::string& where) {
  FileEntry f;
  f.path = field(j, "path", Json::value_t::string, source, where).get<std::string>();
  FT_CHECK(!f.path.empty() && f.path.front() != '/' && f.path.find("..") == std::string::npos, source, ": ", where,
           "path \"", f.path, "\" must stay inside the checkpoint folder");
  f.size = static_cast<std::uint64_t>(int_field(j, "size", source, where, 0));
  f.crc32 = field(j, "crc32", Json::value_t::string, source, where).get<std::string>();
  return f;
}

Json RankShard::to_json() const {
  Json pieces_json = Json::array();
  for (const auto& p : pieces) pieces_json.push_back(Json::array({p.name, p.param_offset, p.length, p.shard_offset}));
  return Json{{"rank", rank}, {"file", file}, {"numel", numel}, {"pieces", pieces_json}};
}

RankShard RankShard::from_json(const Json& j, const std::string& source, const std::string& where) {
  RankShard r;
  r.rank = static_cast<int>(int_field(j, "rank", source, where, 0));
  r.file = field(j, "file", Json::value_t::string, source, where).get<std::string>();
  r.numel = int_field(j, "numel", source, where, 0);
  for (const Json& p : field(j, "pieces", Json::value_t::array, source, where)) {
    FT_CHECK(p.is_array() && p.size() == 4 && p[0].is_string() && p[1].is_number_integer() &&
                 p[2].is_number_integer() && p[3].is_number_integer(),
             source, ": ", where, "a piece must be [name, param_offset, length, shard_offset]");
    parallel::ShardPiece piece{p[0].get<std::string>(), p[1].get<std::int64_t>(), p[2].get<std::int64_t>(),
                               p[3].get<std::int64_t>()};
    FT_CHECK(piece.param_offset >= 0 && piece.length > 0 && piece.shard_offset >= 0 &&
                 piece.shard_offset + piece.length <= r.numel,
             source, ": ", where, "piece of ", piece.name, " lies outside the shard of ", r.numel, " elements");
    r.pieces.push_back(std::move(piece));
  }
  return r;
}

Json Manifest::to_json() const {
  Json files_json = Json::array();
  for (const FileEntry& f : files) files_json.push_back(f.to_json());
  Json ranks_json = Json::array();
  for (const RankShard& r : ranks) ranks_json.push_back(r.to_json());
  return Json{{"format_version", format_version}, {"step", step},   {"world_size", world_size},
              {"strategy", strategy},             {"config_hash", config_hash},
              {"files", files_json},              {"ranks", ranks_json}};
}

Manifest Manifest::from_json(const Json& j, const std::string& source) {
  Manifest m;
  FT_CHECK(j.is_object(), source, ": expected a JSON object");
  m.format_version = static_cast<int>(int_field(j, "format_version", source, "", 1));
  FT_CHECK(m.format_version == kFormatVersion, source, ": format_version ", m.format_version,
           " is not one this build reads (", kFormatVersion, ")");
  m.step = int_field(j, "step", source, "", 0);
  m.world_size = static_cast<int>(int_field(j, "world_size", source, "", 1));
  m.strategy = field(j, "strategy", Json::value_t::string, source, "").get<std::string>();
  m.config_hash = field(j, "config_hash", Json::value_t::string, source, "").get<std::string>();
  const Json& files = field(j, "files", Json::value_t::array, source, "");
  for (std::size_t i = 0; i < files.size(); ++i) m.files.push_back(FileEntry::from_json(files[i], source, str("files[", i, "]: ")));
  const Json& ranks = field(j, "ranks", Json::value_t::array, source, "");
  FT_CHECK(static_cast<int>(ranks.size()) == m.world_size, source, ": \"ranks\" has ", ranks.size(),
           " entries for world_size ", m.world_size);
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const std::string where = str("ranks[", i, "]: ");
    RankShard r = RankShard::from_json(ranks[i], source, where);
    FT_CHECK(r.rank == static_cast<int>(i), source, ": ", where, "rank ", r.rank, ", expected ", i);
    FT_CHECK(m.find(r.file) != nullptr, source, ": ", where, "file \"", r.file, "\" is not in \"files\"");
    m.ranks.push_back(std::move(r));
  }
  return m;
}

const FileEntry* Manifest::find(const std::string& path) const {
  for (const FileEntry& f : files)
    if (f.path == path) return &f;
  return nullptr;
}

FileEntry describe_file(const std::string& dir, const std::string& relative) {
  const std::string path = join_path(dir, relative);
  return FileEntry{relative, file_size(path), crc32_hex(file_crc32(path))};
}

void verify_file(const std::string& dir, const Manifest& m, const std::string& relative) {
  const std::string path = join_path(dir, relative);
  const FileEntry* entry = m.find(relative);
  FT_CHECK(entry != nullptr, path, ": not listed in ", join_path(dir, kManifestFile));
  FT_CHECK(file_exists(path), path, ": missing (the manifest lists it); the checkpoint is damaged");
  const std::uint64_t size = file_size(path);
  FT_CHECK(size == entry->size, path, ": ", size, " bytes, the manifest says ", entry->size,
           " (truncated or damaged); resume from an earlier checkpoint with --resume");
  const std::string crc = crc32_hex(file_crc32(path));
  FT_CHECK(crc == entry->crc32, path, ": checksum mismatch (CRC-32 ", crc, ", the manifest says ", entry->crc32,
           "): the file is damaged; resume from an earlier checkpoint with --resume");
}

Manifest read_manifest(const std::string& dir) {
  const std::string path = join_path(dir, kManifestFile);
  FT_CHECK(file_exists(path), dir, ": not a complete checkpoint (no ", kManifestFile, ")");
  return Manifest::from_json(parse_json(read_file(path), path), path);
}

void write_manifest(const std::string& dir, const Manifest& manifest) {
  write_file_atomic(join_path(dir, kManifestFile), manifest.to_json().dump(1) + "\n");
}

}  // namespace ft::checkpoint
