// SPDX-License-Identifier: Apache-2.0
// The one entry into toml++ for lastcall's config files (services and jobs).
#pragma once

#include <string>
#include <string_view>

#include <toml++/toml.h>

#include "lastcall/core/error.hpp"

namespace lastcall {

// Parses a TOML document; errors are "PATH:LINE: what". A TOML file must be UTF-8 (TOML 1.0):
// text that is not is refused here, with its line, before toml++ sees it (Debian's toml++ 3.x
// reaches an unreachable point in its Unicode tables on some ill-formed sequences: found by
// the config fuzzer).
Result<toml::table> parse_toml_document(std::string_view text, const std::string& path);

}  // namespace lastcall
