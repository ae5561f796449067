// SPDX-License-Identifier: Apache-2.0
// Aligned columns for the tables lastcall prints for people (runs, status, report): each column
// as wide as its widest cell, two spaces between columns, no trailing blanks.
#pragma once

#include <string>
#include <vector>

namespace lastcall {

// rows[0] is the header. Every line starts with `indent` and ends with '\n'.
std::string format_table(const std::vector<std::vector<std::string>>& rows,
                         const std::string& indent = "");

}  // namespace lastcall
