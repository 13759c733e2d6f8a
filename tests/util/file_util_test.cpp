// util/file_util: atomic writes replace whole files and leave no temporary behind.
#include <gtest/gtest.h>

#include <filesystem>

#include "test_support.h"
#include "util/file_util.h"

namespace ft {
namespace {

TEST(FileUtil, AtomicWriteReplacesContents) {
  test::TempDir dir;
  const std::string path = dir.file("a.txt");
  write_file_atomic(path, "first");
  write_file_atomic(path, "second, longer");
  EXPECT_EQ(read_file(path), "second, longer");
  int entries = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator(dir.path())) ++entries;
  EXPECT_EQ(entries, 1) << "a temporary file was left behind";
}

TEST(FileUtil, FailedWriteKeepsOldFile) {
  test::TempDir dir;
  const std::string path = dir.file("a.txt");
  write_file_atomic(path, "old");
  EXPECT_THROW(write_file_atomic_with(path, [](int) { throw Error("disk on fire"); }), Error);
  EXPECT_EQ(read_file(path), "old");
}

TEST(FileUtil, ErrorsNameThePath) {
  EXPECT_FT_ERROR(read_file("/nonexistent/file"), "/nonexistent/file: cannot open");
  EXPECT_FT_ERROR(write_file_atomic("/nonexistent/dir/file", "x"), "/nonexistent/dir/file.tmp");
}

TEST(FileUtil, Paths) {
  EXPECT_EQ(join_path("a", "b"), "a/b");
  EXPECT_EQ(join_path("a/", "b"), "a/b");
  EXPECT_EQ(join_path("a", "/abs"), "/abs");
  EXPECT_EQ(parent_directory("x/y/z.txt"), "x/y");
  EXPECT_EQ(parent_directory("z.txt"), ".");
}

}  // namespace
}  // namespace ft
