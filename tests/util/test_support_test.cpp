// tests/support: under the sanitizers a report printed by a child process (a rank that was
// meant to fail, say) must fail the test that ran it, whatever the child's exit code.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include "test_support.h"

namespace ft {
namespace {

TEST(TestSupport, SanitizerReportInAChildsOutputFailsTheTest) {
  EXPECT_NONFATAL_FAILURE(
      test::run_command("sh -c \"echo 'lib/x.cpp:12:3: runtime error: signed integer overflow' >&2; exit 3\"", true),
      "sanitizer report in the output of");
  EXPECT_NONFATAL_FAILURE(test::run_command("echo '==1==ERROR: AddressSanitizer: heap-use-after-free'"),
                          "sanitizer report");
  const test::CommandResult clean = test::run_command("echo fine; exit 2", true);
  EXPECT_EQ(clean.exit_code, 2);
  EXPECT_EQ(clean.output, "fine\n");
}

}  // namespace
}  // namespace ft
