// The README is the front door: it must document every config key the schema accepts.
#include <gtest/gtest.h>

#include "config/run_config.h"
#include "test_support.h"
#include "util/file_util.h"

namespace ft::config {
namespace {

TEST(Readme, DocumentsEveryConfigKey) {
  const std::string readme = read_file(test::data_path("../../README.md"));
  for (const KeySpec& key : run_config_schema().keys())
    EXPECT_NE(readme.find("`" + key.path + "`"), std::string::npos) << key.path << " is not in README.md";
}

}  // namespace
}  // namespace ft::config
