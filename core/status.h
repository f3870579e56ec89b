// absl::Status helpers missing from Debian's abseil 20220623: RETURN_IF_ERROR, ASSIGN_OR_RETURN.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define MXS_CONCAT_INNER_(a, b) a##b
#define MXS_CONCAT_(a, b) MXS_CONCAT_INNER_(a, b)

// Returns the status from the enclosing function when `expr` is not OK.
#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    ::absl::Status mxs_status_ = (expr);               \
    if (!mxs_status_.ok()) return mxs_status_;         \
  } while (0)

// ASSIGN_OR_RETURN(auto x, Foo()); declares/assigns x from a StatusOr or returns its status.
#define ASSIGN_OR_RETURN(lhs, rexpr) \
  MXS_ASSIGN_OR_RETURN_IMPL_(MXS_CONCAT_(mxs_statusor_, __LINE__), lhs, rexpr)
#define MXS_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                               \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()
