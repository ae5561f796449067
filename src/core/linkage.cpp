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

}  // namespace lastcall
