// SPDX-License-Identifier: Apache-2.0
// Errors carry their context: the syscall or step, the object (pid, path) and the errno text.
#pragma once

#include <string>
#include <string_view>
#include <variant>

namespace lastcall {

struct Error {
    std::string message;  // one line, e.g. "open /run/x.json.tmp: Read-only file system"
    int code = 0;         // the errno behind it, when a system call failed (sys_error)
};

// "what: strerror(err)" in one place so every message has the same shape.
Error sys_error(std::string_view what, int err);

// A value or an Error. C++20 has no std::expected; this is the small subset we use.
template <typename T>
class Result {
  public:
    Result(T value) : v_(std::move(value)) {}
    Result(Error error) : v_(std::move(error)) {}
    bool ok() const { return std::holds_alternative<T>(v_); }
    explicit operator bool() const { return ok(); }
    T& value() { return std::get<T>(v_); }
    const T& value() const { return std::get<T>(v_); }
    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }
    T& operator*() { return value(); }
    const Error& error() const { return std::get<Error>(v_); }

  private:
    std::variant<T, Error> v_;
};

struct Ok {};
using Status = Result<Ok>;

}  // namespace lastcall
