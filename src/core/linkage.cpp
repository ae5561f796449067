// SPDX-License-Identifier: Apache-2.0
#include "lastcall/core/linkage.hpp"

namespace lastcall {

bool can_load_shared_libraries() {
#ifdef LASTCALL_STATIC_BUILD
    return false;
#else
    return true;
#endif
}

const char* twin_relative_path() {
#if defined(LASTCALL_STATIC_BUILD) && defined(LASTCALL_TWIN_RELPATH)
    return LASTCALL_TWIN_RELPATH;
#else
    return nullptr;
#endif
}

}  // namespace lastcall
