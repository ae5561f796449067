// SPDX-License-Identifier: Apache-2.0
// Private to src/jobs/scheduler*.cpp: the tunings and words the scheduler's parts share.
#pragma once

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "lastcall/jobs/scheduler.hpp"

namespace lastcall {

// After a job's timeout its scope gets SIGTERM; if anything of it is still there this much later,
// SIGKILL.
inline constexpr Millis kTimeoutKillAfter{5000};
inline constexpr const char* kShuttingDown = "shutting down";
// A claim that landed after the loop had given up on it: its run never started.
inline constexpr const char* kClaimedLate =
    "not started: its claim was answered after the claim's deadline";
// The same for a queued run whose `started` landed after the loop had given up on it.
inline constexpr const char* kStartedLate =
    "not started: its start was answered after the call's deadline";
// Why a fire time did not run: its `started` row could not be written (never run unrecorded).
inline std::string not_started_unrecorded(const std::string& why) {
    return "not started: `started` could not be recorded: " + why;
}
// A slice of the loop's own work on jobs (spawning claimed runs, judging exited ones): at most
// this many, and no longer than kSlice, so a signal, a reap or a timer waits for one slice at
// most (a spawn under load takes milliseconds: 32 of them held a SIGUSR1 85-340 ms).
inline constexpr std::size_t kStartsPerSlice = 16;
// A row for each missed fire time of a job, up to this many per turn of the fire timer: a clock
// stepped a year ahead must not write 31 million rows for an `@every 1s` job. Past it the fire
// times are counted (the report's missed_fire_times) and said in the log, not recorded.
inline constexpr std::size_t kMissedRowsPerJob = 1000;
inline constexpr std::size_t kExitsPerSlice = 64;
// Skipped fire times per ledger call at most (flush_skips): 1,000 jobs skipping in one second
// are one commit; a larger backlog goes in several, each a bounded transaction.
inline constexpr std::size_t kSkipsPerBatch = 1000;
inline constexpr Millis kSlice{2};
// The first `max` items of `queue`, moved out of it: the next batch of one kind of record for the
// ledger (flush_endings, flush_skips), shared with the answer's handler.
template <typename T>
std::shared_ptr<std::vector<T>> take_batch(std::vector<T>& queue, std::size_t max) {
    auto batch = std::make_shared<std::vector<T>>();
    auto end = queue.begin() + static_cast<std::ptrdiff_t>(std::min(queue.size(), max));
    std::move(queue.begin(), end, std::back_inserter(*batch));
    queue.erase(queue.begin(), end);
    return batch;
}

// The ledger's close at the very end gets what is left of the records' time (settle_records),
// and at least this: a checkpoint on a healthy disk takes milliseconds.
inline constexpr Millis kCloseAtLeast{250};

// Runs (and jobs) named one by one in the log's last lines on records that did not land
// (say_unwritten): the report lists every one; a line of thousands of ids helps nobody.
inline constexpr std::size_t kNamedInLog = 200;

}  // namespace lastcall
