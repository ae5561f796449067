// SPDX-License-Identifier: Apache-2.0
// `lastcall report [FILE]`: the JSON shutdown report (docs/report.md) drawn for people: a header
// with the verdict and the budget, a timeline of the shutdown, one line per process with how it
// ended and a bar over the shutdown's time, then the job runs and services it names.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "lastcall/core/error.hpp"

namespace lastcall {

struct ReportView {
    int width = 80;  // columns for the process bars (the terminal's, else 80)
};

// The text for one report; an error names what is wrong with the input (not JSON, not a report).
Result<std::string> render_report_text(std::string_view json, const ReportView& view);

// `lastcall report [--json] [FILE]`: FILE, or standard input when it is not a terminal.
// Exit 0; 1 when the file cannot be read or is not a report; 2 on a usage error.
int run_report(const std::vector<std::string>& args);

}  // namespace lastcall
