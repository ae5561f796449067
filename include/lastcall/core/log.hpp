// SPDX-License-Identifier: Apache-2.0
// spdlog is configured once, here: text or JSON lines on stderr, or the journal.
#pragma once

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace lastcall {

enum class LogFormat { Text, Json };
// Which program's contract a run keeps: lastcall's own, or that of tini (docker-init) or dumb-init
// when invoked under their names or with --compat (its log lines are the peer's, PeerSink).
enum class CompatMode { None, Tini, DumbInit };

// What the logger is told, whoever parsed it (the command line, `lastcall up`).
struct LogSettings {
    LogFormat format = LogFormat::Text;
    std::string level = "info";  // spdlog's level names
    // A peer's contract: lastcall's own lines at own_level (empty: `level` for both), the peer's
    // at `level`.
    CompatMode peer = CompatMode::None;
    std::string own_level;
};

// Under systemd with stderr connected to journald (JOURNAL_STREAM names stderr's device and inode),
// lines go to the journal with their priority; otherwise text or JSON lines on stderr.
void setup_logging(const LogSettings& settings);
// The logger of a peer's own lines under its name (tini's, dumb-init's: supervisor/forwarding.cpp),
// at the peer's verbosity; the default logger otherwise.
spdlog::logger& peer_log();

// Log lines to stderr never block the loop: they are written without blocking (a new open file
// description of stderr's pipe or tty with O_NONBLOCK, or send(MSG_DONTWAIT) on a socket), what
// does not fit waits in a buffer of at most kLogBacklog bytes, and whole lines beyond that are
// dropped and counted. lastcall reports the count at exit ("lost N log lines").
inline constexpr std::size_t kLogBacklog = 64 * 1024;
std::uint64_t log_lines_lost();
// Lines written into the backlog and not yet out (stderr's reader is behind).
std::uint64_t log_lines_waiting();
// At exit: tries to write the backlog for at most max_wait (a reader that stopped reading does not
// hold the exit longer).
void flush_log_backlog(std::chrono::milliseconds max_wait);
// One journald native-protocol datagram: PRIORITY, SYSLOG_IDENTIFIER=lastcall and MESSAGE (in the
// length-prefixed form when it holds a newline).
std::string journal_entry(int priority, std::string_view message);
// A sink that sends each line as such a datagram to socket_path (journald's is
// /run/systemd/journal/socket); lines it cannot send go to stderr.
spdlog::sink_ptr make_journal_sink(const std::string& socket_path);

// True when journal_stream ("DEV:INODE", as systemd sets JOURNAL_STREAM) names fd's open file.
bool journal_stream_matches(const char* journal_stream, int fd);

}  // namespace lastcall
