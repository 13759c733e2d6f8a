// The ranks' output prefixed line by line, and the free port ft_launch picks for rank 0's store.
#include <gtest/gtest.h>
#include <unistd.h>

#include "launch/free_port.h"
#include "launch/rank_output.h"

namespace ft::launch {
namespace {

TEST(LinePrefixer, PassesOnCompleteLinesOnly) {
  LinePrefixer lines(rank_prefix(3));
  EXPECT_EQ(lines.feed("one\ntw", 6), "[rank 3] one\n");
  EXPECT_EQ(lines.feed("o\nthree\n", 8), "[rank 3] two\n[rank 3] three\n");
  EXPECT_EQ(lines.feed("par", 3), "");
  EXPECT_EQ(lines.feed("tial", 4), "");
  // At the end of the stream a line without a newline gets one.
  EXPECT_EQ(lines.finish(), "[rank 3] partial\n");
  EXPECT_EQ(lines.finish(), "");
  EXPECT_EQ(lines.feed("\n", 1), "[rank 3] \n");
}

TEST(FreePort, IsFreeOrKeptInUse) {
  const int port = free_port();
  EXPECT_GT(port, 0);
  EXPECT_LT(port, 65536);
  EXPECT_TRUE(port_is_free(port));
  int kept = -1;
  const int used = free_port(&kept);
  ASSERT_GE(kept, 0);
  EXPECT_FALSE(port_is_free(used));
  ::close(kept);
}

}  // namespace
}  // namespace ft::launch
