// SPDX-License-Identifier: Apache-2.0
// `lastcall runs ...` (the run ledger) and `lastcall jobs ...` (the schedule), dispatched from
// main() before the supervisor's own command line is parsed. args is main's whole argv.
#pragma once

#include <string>
#include <vector>

namespace lastcall {

// lastcall runs [--job NAME] [--state S] [--json] [--state-dir D | --config F]
// lastcall runs release RUN_ID [--state-dir D | --config F]
int run_runs(const std::vector<std::string>& args);
// lastcall jobs [--config F] [--crontab F] [--count N]
int run_jobs(const std::vector<std::string>& args);

}  // namespace lastcall
