// SPDX-License-Identifier: Apache-2.0
// Private to src/jobs/config*.cpp: what the [jobs.*] loader and the crontab reader share.
#pragma once

#include <string>
#include <string_view>

#include "lastcall/core/error.hpp"

namespace lastcall {

// [A-Za-z0-9_.-]+: a job's name appears in the ledger, the logs and cgroup names.
bool valid_job_name(std::string_view name);

inline constexpr const char* kOnInterruptedWords =
    "expected \"retry\", \"cleanup-retry\", \"hold\" or \"none\"";

// "FILE:LINE: KEY: message".
Error config_error_at(const std::string& path, long line, std::string_view key,
                      const std::string& message);

}  // namespace lastcall
