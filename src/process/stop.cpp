// SPDX-License-Identifier: Apache-2.0
#include "lastcall/process/stop.hpp"

#include "lastcall/core/read_file.hpp"
#include "lastcall/core/signals.hpp"

#include <fcntl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <charconv>
#include <climits>
#include <cstdlib>
#include <cstring>

#include <algorithm>

namespace lastcall {

StopPassResult send_stop_signal(const StopPassIo& io, int sig,
                                const std::function<bool(const ProcInfo&)>& take, int max_passes,
                                std::vector<FreezeHold>* carried) {
    StopPassResult result;
    // Declared before the passes, released after them: the thaw comes after the last signal.
    // A round the budget cut keeps them in *carried: nothing forks, and no signalled process
    // runs its TERM handler (which could fork a cleanup helper that the next round would take
    // for a member), until the round that finishes the passes thaws.
    std::vector<FreezeHold> local;
    std::vector<FreezeHold>& holds = carried ? *carried : local;
    if (holds.empty() && io.freeze) holds = io.freeze();
    result.frozen = !holds.empty();
    for (const auto& h : holds) result.frozen = result.frozen && h.complete();
    // Unfrozen, one quiet pass is not proof: a process reparented to lastcall while the walk
    // read its old parent's children (that parent exiting in its TERM handler) is in neither
    // list and missing from that pass only. Two quiet passes in a row settle it.
    int quiet_needed = result.frozen ? 1 : 2, quiet = 0;
    for (int pass = 0; pass < max_passes; ++pass) {
        // Out of time between two passes, before the tree settled. Frozen, nobody was born
        // since the last pass, which reached everyone: the passes end and the thaw lets the
        // members act on their signal (another round would keep them frozen longer). Not frozen,
        // what the next pass would find (a pre-fork server's workers, forked while the last pass
        // walked 300 other members before reaching the server) would only ever get the kill at
        // grace end: a cut, as within a pass, and the next round goes on from the record. Ending
        // the passes there gave a tree that obeys SIGTERM a forced stop under load (39 workers
        // of test_tree's prefork test, whose first pass took the whole 250 ms budget).
        if (pass > 0 && io.out_of_time && io.out_of_time()) {
            if (result.frozen) {
                result.ending = PassEnding::Settled;
                break;
            }
            result.ending = PassEnding::CutBetweenPasses;
            return result;  // *carried keeps the holds for the next round
        }
        ++result.passes;
        int fresh = 0;
        bool cut = false;
        auto members = io.members();
        // A walk that gave up at the budget (members_within) saw only part of the unit: finding
        // nobody new in that part proves nothing.
        bool partial = io.out_of_time && io.out_of_time();
        const auto& signals_end = io.past_deadline ? io.past_deadline : io.out_of_time;
        for (const auto& p : members) {
            // Also inside a pass: under a fork bomb one pass over thousands of members, each
            // a pidfd, a /proc read and two signals, can outlast the grace. Whoever is left is
            // covered by the kill at grace end.
            if (signals_end && (result.signalled & 15) == 15 && signals_end()) {
                cut = true;
                break;
            }
            if (!take(p)) continue;
            ++fresh;
            if (!io.send(p, sig)) continue;  // gone meanwhile: nothing to stop
            ++result.signalled;
            // The stop signal is pending on a stopped process until it runs again. A member
            // held by a SIGSTOP hold gets its SIGCONT with the thaw, after the passes.
            bool held = std::any_of(holds.begin(), holds.end(),
                                    [&](const FreezeHold& h) { return h.holds(p); });
            // Only to a member that was stopped when the pass read it ('T'): stopped, it cannot
            // have acted on the stop signal yet. A SIGCONT to one that runs could land after its
            // reaction to the signal and discard a stop that reaction queued: the SIGSTOP of a
            // PTRACE_ATTACH by a helper it started (LeakSanitizer's tracer at exit, a debugger),
            // whose waitpid then never returned (CI, 2026-12-05).
            if (needs_sigcont(sig) && !held && p.state == 'T') io.send(p, SIGCONT);
        }
        if (cut || partial) {
            result.ending = PassEnding::CutWithinPass;
            return result;  // *carried keeps the holds for the next round
        }
        quiet = fresh == 0 ? quiet + 1 : 0;
        if (quiet >= quiet_needed) {
            result.ending = PassEnding::Settled;
            break;
        }
    }
    holds.clear();  // the thaw, after the last signal of the last round
    return result;
}

StopPassResult send_stop_round(const StopPassIo& io, int sig,
                               const std::function<bool(const ProcInfo&)>& take,
                               StopRounds& rounds) {
    // 16 passes in all, over however many rounds: a fork storm gets as many as one round gave it
    // before rounds existed, and then the kill at grace end, not a busy loop until then. A walk
    // the budget cut half-way still finishes (a round has at least one pass).
    auto result = send_stop_signal(io, sig, take, std::max(16 - rounds.passes, 1), &rounds.holds);
    rounds.passes += result.passes;
    // Twice the budget after a walk that did not fit in one; after a cut between two whole
    // passes the walk fits: the same budget, so that the loop is not kept longer each round.
    switch (result.ending) {
        case PassEnding::CutWithinPass:
            rounds.budgets = std::min(rounds.budgets * 2, 64);
            break;
        case PassEnding::CutBetweenPasses:
            break;
        case PassEnding::Settled:
        case PassEnding::OutOfPasses:
            rounds.budgets = 1;
            rounds.passes = 0;
            break;
    }
    rounds.pending = result.cut();
    return result;
}

pid_t read_last_pid(int last_pid_fd) {
    char buf[24];
    long n = last_pid_fd >= 0 ? ::syscall(SYS_pread64, last_pid_fd, buf, sizeof buf - 1, 0) : -1;
    long last = 0;
    for (long i = 0; i < n && buf[i] >= '0' && buf[i] <= '9'; ++i)
        last = last * 10 + (buf[i] - '0');
    return n > 0 && last <= INT_MAX ? static_cast<pid_t>(last) : 0;
}

bool stop_signal_pending(pid_t pid, int sig) {
    if (sig <= 0 || sig > 64) return false;
    auto text = read_file("/proc/" + std::to_string(pid) + "/status");
    if (!text) return false;
    for (const char* field : {"ShdPnd", "SigPnd"})
        if (auto bits = proc_status_mask(*text, field); bits && (*bits >> (sig - 1)) & 1ULL)
            return true;
    return false;
}

std::optional<BirthLine> read_birth_line(int last_pid_fd) {
    // On the path of the main child's stop signal: only calls that start-up has made already.
    // A libc function called for the first time is resolved by ld.so then (lazy binding: a
    // symbol lookup and a fresh page of stack for its register save area, 5-10 us on the VM of
    // bench/results), hence syscall() for the read, and the clock ticks looked up afterwards
    // (BirthLine::ns_per_clock_tick).
    pid_t last = read_last_pid(last_pid_fd);
    if (last <= 0) return std::nullopt;
    BirthLine line;
    line.last_pid = last;
    timespec now{};
    if (::clock_gettime(CLOCK_BOOTTIME, &now) != 0) return std::nullopt;
    line.boottime_ns = static_cast<unsigned long long>(now.tv_sec) * 1'000'000'000ULL +
                       static_cast<unsigned long long>(now.tv_nsec);
    return line;
}

UniqueFd open_ns_last_pid() {
    return UniqueFd(::open("/proc/sys/kernel/ns_last_pid", O_RDONLY | O_CLOEXEC));
}

unsigned long long BirthLine::ns_per_clock_tick() {
    static const unsigned long long ns = [] {
        long hz = ::sysconf(_SC_CLK_TCK);
        return 1'000'000'000ULL / static_cast<unsigned long long>(hz > 0 ? hz : 100);
    }();
    return ns;
}

std::chrono::milliseconds stop_pass_budget_length() {
    static const std::chrono::milliseconds length = [] {
        const char* text = std::getenv("LASTCALL_STOP_PASS_BUDGET_MS");
        int ms = 0;
        if (text && std::from_chars(text, text + std::strlen(text), ms).ec == std::errc{} && ms > 0)
            return std::chrono::milliseconds(ms);
        return kStopPassBudget;
    }();
    return length;
}

}  // namespace lastcall
