// SPDX-License-Identifier: Apache-2.0
#include "lastcall/core/error.hpp"

#include <cstring>

namespace lastcall {

Error sys_error(std::string_view what, int err) {
    std::string msg(what);
    msg += ": ";
    msg += std::strerror(err);
    return Error{std::move(msg), err};
}

}  // namespace lastcall
