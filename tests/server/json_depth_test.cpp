#include "server/json_depth.h"

#include <gtest/gtest.h>

#include <string>

namespace pagoda::server {
namespace {

std::string nested(size_t depth, char open = '[', char close = ']') {
  return std::string(depth, open) + std::string(depth, close);
}

TEST(JsonDepth, CountsArraysAndObjectsTogether) {
  EXPECT_FALSE(json_exceeds_depth(nested(128)));
  EXPECT_TRUE(json_exceeds_depth(nested(129)));
  EXPECT_FALSE(json_exceeds_depth("{\"a\":[{\"b\":[1]}]}", 4));
  EXPECT_TRUE(json_exceeds_depth("{\"a\":[{\"b\":[1]}]}", 3));
}

TEST(JsonDepth, SiblingsDoNotAddUp) {
  std::string body = "[";
  for (int i = 0; i < 1000; ++i) body += nested(100) + ",";
  body += "1]";
  EXPECT_FALSE(json_exceeds_depth(body));
}

TEST(JsonDepth, BracketsInsideStringsAreText) {
  EXPECT_FALSE(json_exceeds_depth("{\"p\":\"" + std::string(100000, '[') + "\"}"));
  // An escaped quote does not end the string; an escaped backslash does not
  // escape the closing quote.
  EXPECT_FALSE(json_exceeds_depth("{\"p\":\"\\\"" + std::string(500, '{') + "\"}"));
  EXPECT_TRUE(json_exceeds_depth("{\"p\":\"\\\\\"," + nested(200) + "}"));
}

TEST(JsonDepth, TheIssueReproIsRefusedWithoutRecursion) {
  const std::string body =
      "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\",\"x\":" + nested(100000) + "}]}";
  EXPECT_TRUE(json_exceeds_depth(body));
}

}  // namespace
}  // namespace pagoda::server
