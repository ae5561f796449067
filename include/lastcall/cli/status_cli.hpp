// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>
#include <vector>

namespace lastcall {

// `lastcall status [--json] [SELECTOR...]`: a table per running lastcall (or the selected ones).
// Exit 0; 1 when none is running or none matches.
int run_status(const std::vector<std::string>& args);

}  // namespace lastcall
