// SPDX-License-Identifier: Apache-2.0
// Environment: the variables a unit of work starts with. One type and one place that decides
// what each kind of unit inherits from lastcall's own environment, so no unit gets a variable
// twice (getenv would see the first, a shell the last) or one meant for someone else.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lastcall {

enum class UnitKind {
    Main,     // the command after `--`
    Service,  // an instance of a [services.*] entry or a Procfile line
    Job,      // a run of a [jobs.*] entry or a crontab line (and its verify)
    Helper,   // lastcall's own helpers: the pre-stop hook, a readiness probe
};

// The libpq variables that hold a credential or name a file that does: the password, the
// password file, the connection service file (it may hold `password=`), the client
// certificate's private key. Not those that only say where to connect (PGHOST, PGUSER, ...).
inline constexpr std::string_view kLedgerCredentials[] = {"PGPASSWORD", "PGPASSFILE",
                                                          "PGSERVICEFILE", "PGSSLKEY"};

class Environment {
  public:
    // lastcall's environment as `kind` inherits it:
    //  - NOTIFY_SOCKET never: only lastcall talks to systemd, which knows lastcall as the main
    //    pid (the notify proxy adds its own socket where it is meant);
    //  - LISTEN_* (socket activation) and WATCHDOG_* only for the main command: the sockets and
    //    the watchdog were handed to one process, and a second user would steal connections or
    //    pings;
    //  - LASTCALL_* not for jobs: a job's LASTCALL_RUN_ID and friends are its own, and one
    //    inherited from lastcall's environment could pose as them;
    //  - once withhold_ledger_credentials() was called, kLedgerCredentials by none.
    static Environment inherited(UnitKind kind);
    // lastcall opens a postgresql:// ledger: the libpq variables in its environment are its own
    // credentials (libpq reads them at every connect, so they stay in lastcall's environment),
    // and no unit inherits them. A unit's own settings (a job's or service's `env`) may still
    // set them. Without a postgresql ledger they are the units' and pass as any other variable.
    static void withhold_ledger_credentials();
    static Environment from(const std::vector<std::string>& entries);

    // Replaces an existing value in place (its position is kept), else appends.
    void set(std::string_view key, std::string_view value);
    // "KEY=VALUE"; an entry without '=' is ignored (execve would pass it, getenv never finds it).
    void set(std::string_view entry);
    void unset(std::string_view key);
    // The value of `key`: a view of this environment's own entry, valid until the next set or
    // unset (none of a temporary: it would dangle at once).
    std::optional<std::string_view> get(std::string_view key) const&;
    std::optional<std::string_view> get(std::string_view key) && = delete;
    std::size_t size() const { return vars_.size(); }

    // "KEY=VALUE" each key once, for execve; taken from a temporary without a copy.
    const std::vector<std::string>& entries() const& { return vars_; }
    std::vector<std::string> entries() && { return std::move(vars_); }

  private:
    // `kv` ("KEY=VALUE") in place of `key`'s entry, or added last.
    void put(std::string_view key, std::string kv);

    // Kept as execve takes them, "KEY=VALUE": every spawn built the pairs and then the entries
    // from them, two copies of the environment on the heap at every start (issue 18).
    std::vector<std::string> vars_;
};

}  // namespace lastcall
