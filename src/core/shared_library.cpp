// SPDX-License-Identifier: Apache-2.0
#include "lastcall/core/shared_library.hpp"

namespace lastcall {

Status SharedLibraryOnce::load(const std::function<bool(void*)>& resolve) {
    std::call_once(once_, [&] {
        void* handle = ::dlopen(soname_, RTLD_NOW | RTLD_LOCAL);
        if (!handle) {
            failure_ = std::string(needed_by_) + ": " + ::dlerror();
            return;
        }
        if (!resolve(handle)) failure_ = std::string(soname_) + ": " + ::dlerror();
    });
    if (!failure_.empty()) return Error{failure_};
    return Ok{};
}

}  // namespace lastcall
