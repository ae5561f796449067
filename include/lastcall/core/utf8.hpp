// SPDX-License-Identifier: Apache-2.0
// UTF-8 well-formedness, as Unicode 15 section 3.9 (table 3-7) defines it.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace lastcall {

// Length of the well-formed UTF-8 sequence at s[i], or of its maximal ill-formed subpart (the
// bytes that one U+FFFD replaces, as Unicode recommends and Python's errors="replace" does):
// `valid` says which. The second byte's range depends on the first: no overlong forms, no
// surrogates, nothing above U+10FFFF.
std::size_t utf8_sequence(std::string_view s, std::size_t i, bool& valid);

// Offset of the first byte that is not well-formed UTF-8, or nullopt.
std::optional<std::size_t> first_invalid_utf8(std::string_view s);

// `s`, which came from a unit (its output, its command line), safe to print to a terminal: the
// control characters as \xNN (C0 but the tab, and DEL) or \u00NN (C1, U+0080..U+009F, which a
// terminal may read as ESC [ and friends), each byte that is not UTF-8 as \xNN. A unit's
// `ESC ] 0;title BEL` or `ESC [2J` would otherwise retitle or clear the reader's terminal, and its
// newline forge a line of lastcall's. Everything else, UTF-8 included, is kept as it is.
std::string printable(std::string_view s);
// The same, appended to `out` (a line being built: no copy of its own).
void append_printable(std::string& out, std::string_view s);

}  // namespace lastcall
