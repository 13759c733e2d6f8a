// ft::Error and the two checking macros every module uses.
// FT_CHECK is for user-facing errors (bad file, bad config value): the message names the file,
// key, tensor or rank, what was expected and what was found. FT_ASSERT is for broken internal
// invariants: it adds the source location because that is a bug in ft, not in the input.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace ft {

// An error the user can act on. Programs catch it in main(), print what() and exit non-zero.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A bug in ft itself: an invariant that the code should have guaranteed did not hold.
class InternalError : public Error {
 public:
  explicit InternalError(const std::string& message) : Error(message) {}
};

// Concatenates any streamable values: str("expected ", n, " got ", m).
template <typename... Args>
std::string str(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}

}  // namespace ft

#define FT_CHECK(cond, ...)                                 \
  do {                                                      \
    if (!(cond)) throw ::ft::Error(::ft::str(__VA_ARGS__)); \
  } while (0)

// FT_ASSERT(cond, "what should have held", values...): the message is required.
#define FT_ASSERT(cond, ...)                                                            \
  do {                                                                                  \
    if (!(cond))                                                                        \
      throw ::ft::InternalError(::ft::str("internal error at ", __FILE__, ":", __LINE__, \
                                          ": (", #cond, ") ", __VA_ARGS__));            \
  } while (0)
