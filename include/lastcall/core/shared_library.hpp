// SPDX-License-Identifier: Apache-2.0
// Libraries loaded with dlopen on first use (libpq, libmicrohttpd, and SQLite in the default
// binary): a run that never needs one maps none of it.
#pragma once

#include <dlfcn.h>

#include <functional>
#include <mutex>
#include <string>

#include "lastcall/core/error.hpp"

namespace lastcall {

// dlsym into a typed function pointer; false when the symbol is missing (dlerror() says why).
template <typename F>
bool resolve_symbol(void* handle, const char* name, F& out) {
    out = reinterpret_cast<F>(::dlsym(handle, name));
    return out != nullptr;
}

// A library opened at most once per process and never unloaded (libpq registers atexit handlers
// through libssl): the first load() opens it and hands the handle to `resolve`, and that outcome
// is every later call's. `needed_by` starts the error when the library is missing, with the
// package to install ("the run ledger needs SQLite (apt-get install libsqlite3-0)").
class SharedLibraryOnce {
  public:
    SharedLibraryOnce(const char* soname, const char* needed_by)
        : soname_(soname), needed_by_(needed_by) {}
    Status load(const std::function<bool(void*)>& resolve);

  private:
    const char* soname_;
    const char* needed_by_;
    std::once_flag once_;
    std::string failure_;
};

}  // namespace lastcall
