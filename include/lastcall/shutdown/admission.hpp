// SPDX-License-Identifier: Apache-2.0
// Admission of work: the one protocol that makes "no new work" and "active == 0" agree.
//
// The race it closes: a worker reads "running", the drain flips to draining and sees active == 0,
// closes shared resources, and only then the worker increments active and uses a closed resource.
// Here the state check and the increment are one call, so a unit of work (a spawn, a scheduled
// run, a restart) is either admitted before close() or refused after it, never in between. Each
// admitted unit holds a Ticket:
//   admitted --started()--> started --release()/~Ticket--> released   (exactly once)
//   admitted --~Ticket / rollback()----------------------> rolled back (it never started)
// A ticket dropped without being started is a rollback, not a release: it never ran.
//
// Single-threaded on purpose: every admission, start, release and the drain's check happen on
// lastcall's event loop thread (the services, the scheduler, the main child; libmicrohttpd runs
// on that loop too), so "one step" needs no lock. The ledger worker's thread
// (jobs/ledger_worker.hpp) never sees a ticket: its calls' answers, and with them the tickets of
// the fire times they claimed, are handled and dropped on the loop. The first version had a mutex,
// a condition variable and a threaded stress test under TSan for workers that never existed. A
// threaded caller would need the lock back: nothing here is safe to call from two threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace lastcall {

class Admission;

// Where a unit of work enters: counted separately in the report (and the metrics it feeds).
enum class EntryPath { Main, ServiceStart, Restart, JobFire };
inline constexpr EntryPath kEntryPaths[] = {EntryPath::Main, EntryPath::ServiceStart,
                                            EntryPath::Restart, EntryPath::JobFire};
std::string_view to_string(EntryPath p);

class Ticket {
  public:
    Ticket(Ticket&& other) noexcept;
    Ticket& operator=(Ticket&& other) noexcept;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket();

    void started();   // the work really began (fork succeeded, process running)
    void release();   // the work ended (its process tree is gone); no-op if already done
    void rollback();  // the work never began (fork failed, cancelled before start)
    bool is_started() const { return state_ == Started; }
    std::uint64_t id() const { return id_; }

  private:
    friend class Admission;
    enum Phase { Admitted, Started, Done };
    Ticket(Admission* owner, std::uint64_t id, EntryPath path)
        : owner_(owner), id_(id), path_(path) {}
    void finish();
    Admission* owner_;
    std::uint64_t id_;
    EntryPath path_ = EntryPath::Main;
    Phase state_ = Admitted;
};

// Per entry path: registered (admitted), executing (started, not yet released), released, and
// the ones refused after the drain began or rolled back because they never started.
struct PathCounts {
    std::uint64_t registered = 0, executing = 0, released = 0, refused = 0, rolled_back = 0;
};

struct AdmissionStats {
    std::uint64_t admitted = 0, refused = 0, rolled_back = 0, released = 0;
    std::size_t active = 0;
    bool open = true;
    PathCounts by_path[4];
    const PathCounts& of(EntryPath p) const { return by_path[static_cast<int>(p)]; }
};

class Admission {
  public:
    // Admits a unit of work if intake is open. The check and the increment are one step.
    std::optional<Ticket> try_admit(EntryPath path = EntryPath::Main);
    // Work that was due on `path` and is not started because intake is closed, where the owner
    // decides so without asking for a ticket (a fire time due while draining, a service still
    // waiting for its start or its back-off at the drain): counted as refused, like a
    // try_admit() after close(), so the report's refusals are every unit turned away. Only
    // after close(): before it, nothing is refused.
    void refuse(EntryPath path);
    // Closes intake (idempotent) and returns the number of active units at that moment. Once
    // this returns, try_admit() refuses, so the count can only go down.
    std::size_t close();
    bool is_open() const;
    std::size_t active() const;
    AdmissionStats stats() const;

  private:
    friend class Ticket;
    void finished(bool was_started, EntryPath path);
    void started(EntryPath path);

    bool open_ = true;
    std::size_t active_ = 0;
    std::uint64_t next_id_ = 1;
    AdmissionStats counts_;
};

}  // namespace lastcall
