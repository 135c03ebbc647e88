// Status helpers shared by every Tessel module.
//
// Debian 12's abseil (20220623) ships no status_macros.h, so Tessel defines its own:
//
//   absl::StatusOr<Shape> ParseShape(std::string_view text);
//   absl::Status Use(std::string_view text) {
//     TESSEL_ASSIGN_OR_RETURN(Shape shape, ParseShape(text));
//     TESSEL_RETURN_IF_ERROR(Check(shape));
//     return absl::OkStatus();
//   }
//
// TESSEL_CHECK aborts the process with the file, line and message: it guards internal
// invariants only. Anything a user controls (text, JSON, flags, peers) returns a Status.
#ifndef TESSEL_CORE_STATUS_MACROS_H_
#define TESSEL_CORE_STATUS_MACROS_H_

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TESSEL_STATUS_CONCAT_INNER_(a, b) a##b
#define TESSEL_STATUS_CONCAT_(a, b) TESSEL_STATUS_CONCAT_INNER_(a, b)

// Returns the status from the enclosing function if `expr` (an absl::Status) is not OK.
#define TESSEL_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::absl::Status tessel_status_ = (expr);          \
    if (!tessel_status_.ok()) return tessel_status_; \
  } while (false)

// Evaluates `rexpr` (an absl::StatusOr<T>); on error returns its status, otherwise moves the
// value into `lhs` (a declaration such as `Shape s` or an existing variable).
#define TESSEL_ASSIGN_OR_RETURN(lhs, rexpr) \
  TESSEL_ASSIGN_OR_RETURN_IMPL_(TESSEL_STATUS_CONCAT_(tessel_statusor_, __LINE__), lhs, rexpr)

#define TESSEL_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                  \
  if (!statusor.ok()) return std::move(statusor).status();  \
  lhs = std::move(statusor).value()

// Aborts with a message when an internal invariant is broken. Never use for user input.
#define TESSEL_CHECK(cond)                                                                 \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "%s:%d: TESSEL_CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                        \
    }                                                                                      \
  } while (false)

// Aborts if `expr` (an absl::Status or StatusOr) is not OK; for internal invariants only.
#define TESSEL_CHECK_OK(expr)                                                                \
  do {                                                                                       \
    const auto& tessel_check_status_ = (expr);                                               \
    if (!::tessel::internal_status::GetStatus(tessel_check_status_).ok()) {                  \
      std::fprintf(                                                                          \
          stderr, "%s:%d: TESSEL_CHECK_OK failed: %s\n", __FILE__, __LINE__,                 \
          std::string(::tessel::internal_status::GetStatus(tessel_check_status_).ToString()) \
              .c_str());                                                                     \
      std::abort();                                                                          \
    }                                                                                        \
  } while (false)

#include <string>

namespace tessel::internal_status {
inline const absl::Status& GetStatus(const absl::Status& status) { return status; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}
}  // namespace tessel::internal_status

#endif  // TESSEL_CORE_STATUS_MACROS_H_
