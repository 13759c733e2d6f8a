// Small file helpers: whole-file reads with errors that name the path, and atomic writes
// (temporary file in the same folder, fsync, rename, fsync of the folder) so that a crash
// leaves either the old file or the new one, never a torn one.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ft {

std::string read_file(const std::string& path);
void write_file_atomic(const std::string& path, const std::string& contents);
// Same, with the contents produced by a callback that writes to an open file descriptor.
void write_file_atomic_with(const std::string& path, const std::function<void(int fd)>& write_body);
// Writes all of `size` bytes to fd or throws naming `path` (handles short writes, EINTR, ENOSPC).
void write_all(int fd, const void* data, std::size_t size, const std::string& path);
void fsync_directory(const std::string& directory);
bool file_exists(const std::string& path);
bool is_directory(const std::string& path);
std::uint64_t file_size(const std::string& path);
void make_directories(const std::string& path);
std::string join_path(const std::string& a, const std::string& b);
std::string parent_directory(const std::string& path);
// The working directory, against which relative paths in configs are read.
std::string current_directory();
// Removes a file or a folder with everything in it (nothing when it does not exist).
void remove_tree(const std::string& path);
// rename(2) with an error naming both paths.
void rename_path(const std::string& from, const std::string& to);
// Names in a folder (not "." or ".."), sorted; empty when the folder does not exist.
std::vector<std::string> list_directory(const std::string& path);

}  // namespace ft
