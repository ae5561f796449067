// SPDX-License-Identifier: Apache-2.0
// The output of the services and the job runs, in one prefix format in every mode (a config's
// [services.*] and [jobs.*], a crontab, `lastcall up`): each unit's stdout and stderr come
// through a pipe into lastcall's loop and go out on lastcall's stdout line by line as
// `name | line`, the name padded to the longest name of the run and coloured only when stdout is
// a terminal and NO_COLOR is unset. Two services that both print `started` are told apart, as
// foreman and supercronic tag every line. The main command's output is never captured: an init
// does not rewrite its main command's stdout.
//
// One UnitOutput is shared by the service manager and the job scheduler of a run, so that their
// lines go through one writer (never interleaved mid-line) in one column width. Lines go out
// through a LineWriter: a reader that stops reading costs lines (counted, said at the end), never
// the loop or the stop.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "lastcall/core/error.hpp"
#include "lastcall/core/fd.hpp"
#include "lastcall/core/line_writer.hpp"

namespace lastcall {

class UnitOutput {
  public:
    // How the read ends are put on the loop: the owner's host (UnitHost::watch / unwatch).
    using Watch = std::function<Status(int fd, std::function<void()> readable)>;
    using Unwatch = std::function<void(int fd)>;

    // Lines waiting for a reader that is behind (a terminal scrolled back, a full pipe): beyond
    // this, whole lines are dropped and counted.
    static constexpr std::size_t kBacklog = 256 * 1024;
    // Read per stream and turn of the loop: a unit that writes as fast as it can (`yes`) must not
    // keep lastcall from a Ctrl-C or a timer; the rest is read on the next turn.
    static constexpr std::size_t kPerTurn = 64 * 1024;
    // Longest partial line kept before it is printed anyway.
    static constexpr std::size_t kMaxLine = 64 * 1024;

    UnitOutput(int fd, bool color) : color_(color), out_(fd, kBacklog) {}
    UnitOutput(const UnitOutput&) = delete;
    UnitOutput& operator=(const UnitOutput&) = delete;

    // Colour for a person at a terminal only, and never when NO_COLOR is set (no-color.org).
    static bool color_for(int fd);

    // Every name that may print, before the first line: the column is as wide as the longest.
    // The n-th name gets the n-th colour.
    void add_name(std::string_view name);
    // Once the loop exists (the first caller's functions are kept: every owner is on one loop).
    void attach(Watch watch, Unwatch unwatch);

    // A pipe for one unit's stdout and stderr, its lines prefixed with `name`: the write end is
    // for the spawn (to be closed once spawned: EOF then means the unit and all it started are
    // done), the read end is watched on the loop. `stream` names it for drain().
    struct Capture {
        UniqueFd write_end;
        int stream = -1;
    };
    Result<Capture> capture(const std::string& name);
    // Prints what the stream holds now (a unit just reaped: its last lines come before the line
    // that says it exited).
    void drain(int stream);
    // One line of lastcall's own in the columns (`lastcall up` says there what happens to the
    // processes, as foreman does).
    void say(std::string_view name, std::string_view text);

    // At exit: every stream read to its end, the backlog given at most `max_wait`. Returns the
    // number of lines dropped because nothing read them in time, once (0 on a later call).
    std::uint64_t finish(std::chrono::milliseconds max_wait);

  private:
    struct Stream {
        std::string name;
        UniqueFd fd;
        std::string partial;
    };
    void read_some(int fd, std::size_t budget);
    void emit(std::string_view name, std::string_view line);

    bool color_;
    LineWriter out_;
    bool opened_ = false;
    bool finished_ = false;
    std::size_t width_ = 0;
    std::vector<std::string> names_;  // registration order: the colours
    std::map<int, Stream> streams_;
    Watch watch_;
    Unwatch unwatch_;
};

}  // namespace lastcall
