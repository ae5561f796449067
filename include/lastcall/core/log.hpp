// spdlog is configured once, here: text or JSON lines on stderr, or the journal.
#pragma once

#include <spdlog/spdlog.h>

#include "lastcall/cli/options.hpp"

namespace lastcall {

// Under systemd with stderr connected to journald (JOURNAL_STREAM names stderr's device and inode),
// lines go to the journal with their priority; otherwise text or JSON lines on stderr. The static
// build has no journal sink and keeps the text format.
void setup_logging(const Options& options);

// True when journal_stream ("DEV:INODE", as systemd sets JOURNAL_STREAM) names fd's open file.
bool journal_stream_matches(const char* journal_stream, int fd);

}  // namespace lastcall
