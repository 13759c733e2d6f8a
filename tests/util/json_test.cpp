// util/json: parse errors name the source and the line/column; hostile nesting is refused.
#include <gtest/gtest.h>

#include "test_support.h"
#include "util/json.h"

namespace ft {
namespace {

TEST(Json, ParsesValidText) {
  Json j = parse_json(R"({"a": [1, 2, {"b": "c"}]})", "inline");
  EXPECT_EQ(j["a"][2]["b"], "c");
}

TEST(Json, ErrorNamesSourceLineAndColumn) {
  EXPECT_FT_ERROR(parse_json("{\n  \"a\": 1,\n  \"b\": ]\n}", "cfg.json"), "cfg.json: invalid JSON at line 3, column 8");
}

TEST(Json, NumberOverflowIsAnError) {
  // Regression: found by fuzz_safetensors_header; nlohmann throws out_of_range, not parse_error.
  EXPECT_FT_ERROR(parse_json(R"({"a": 18E0736})", "num.json"), "num.json: invalid JSON: ");
}

TEST(Json, RefusesDeepNesting) {
  std::string deep(100000, '[');
  EXPECT_FT_ERROR(parse_json(deep, "deep.json", 64), "deep.json: JSON nested more than 64 levels deep");
  EXPECT_EQ(json_nesting_depth(R"({"a": "[[[[", "b": [1, [2]]})", 64), 3);
  EXPECT_EQ(json_nesting_depth(R"(["\"[[["])", 64), 1);
}

TEST(Json, DescribeValues) {
  EXPECT_EQ(describe_json(Json("2e-5x")), "\"2e-5x\" (a string)");
  EXPECT_EQ(describe_json(Json(-1)), "-1");
  EXPECT_EQ(describe_json(Json::object()), "an object");
  EXPECT_EQ(describe_json(Json(nullptr)), "null");
}

TEST(Json, MissingFileNamesPath) {
  EXPECT_FT_ERROR(parse_json_file("/nonexistent/x.json"), "/nonexistent/x.json: cannot open");
}

}  // namespace
}  // namespace ft
