// spdlog is configured once, here: text or JSON lines on stderr, or the journal.
#pragma once

#include <spdlog/spdlog.h>

#include <string>
#include <string_view>

#include "lastcall/options.hpp"

namespace lastcall {

// Under systemd with stderr connected to journald (JOURNAL_STREAM names stderr's device and inode),
// lines go to the journal with their priority; otherwise text or JSON lines on stderr.
void setup_logging(const Options& options);

// One journald native-protocol datagram: PRIORITY, SYSLOG_IDENTIFIER=lastcall and MESSAGE (in the
// length-prefixed form when it holds a newline).
std::string journal_entry(int priority, std::string_view message);
// A sink that sends each line as such a datagram to socket_path (journald's is
// /run/systemd/journal/socket); lines it cannot send go to stderr.
spdlog::sink_ptr make_journal_sink(const std::string& socket_path);

// True when journal_stream ("DEV:INODE", as systemd sets JOURNAL_STREAM) names fd's open file.
bool journal_stream_matches(const char* journal_stream, int fd);

}  // namespace lastcall
