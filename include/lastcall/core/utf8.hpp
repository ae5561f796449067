// SPDX-License-Identifier: Apache-2.0
// UTF-8 well-formedness, as Unicode 15 section 3.9 (table 3-7) defines it.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace lastcall {

// Length of the well-formed UTF-8 sequence at s[i], or of its maximal ill-formed subpart (the
// bytes that one U+FFFD replaces, as Unicode recommends and Python's errors="replace" does):
// `valid` says which. The second byte's range depends on the first: no overlong forms, no
// surrogates, nothing above U+10FFFF.
std::size_t utf8_sequence(std::string_view s, std::size_t i, bool& valid);

// Offset of the first byte that is not well-formed UTF-8, or nullopt.
std::optional<std::size_t> first_invalid_utf8(std::string_view s);

}  // namespace lastcall
