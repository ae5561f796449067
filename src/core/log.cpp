// SPDX-License-Identifier: Apache-2.0
#include "lastcall/core/log.hpp"

#include <fcntl.h>
#include <poll.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>

#include "lastcall/core/fd.hpp"
#include "lastcall/core/json.hpp"
#include "lastcall/core/line_writer.hpp"
#include "lastcall/core/timefmt.hpp"
#include "lastcall/core/utf8.hpp"

namespace lastcall {

namespace {

// The log's own lines (see log.hpp: never blocking the loop).
LineWriter& writer() {
    static LineWriter w(STDERR_FILENO, kLogBacklog);
    return w;
}

// A peer's lines that its contract puts on stdout (tini's INFO and DEBUG): the same bound.
LineWriter& out_writer() {
    static LineWriter w(STDOUT_FILENO, kLogBacklog);
    return w;
}

// Text lines through the writer (spdlog's own stderr sink writes with fwrite and blocks).
class TextStderrSink final : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
  protected:
    void sink_it_(const spdlog::details::log_msg& msg) override {
        // A message may quote a unit (its command line, a reason): printable() keeps its
        // control characters from the reader's terminal and its newlines from forging lines.
        std::string payload = printable(std::string_view(msg.payload.data(), msg.payload.size()));
        spdlog::details::log_msg safe = msg;
        safe.payload = spdlog::string_view_t(payload.data(), payload.size());
        spdlog::memory_buf_t formatted;
        formatter_->format(safe, formatted);
        writer().write_line(std::string_view(formatted.data(), formatted.size()));
    }
    void flush_() override { writer().flush_some(); }
};

// One JSON object per line, for log shippers. spdlog patterns cannot escape a message, so the
// line is built here.
class JsonStderrSink final : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
  protected:
    void sink_it_(const spdlog::details::log_msg& msg) override {
        std::string ts = iso_utc_ms(
            std::chrono::duration_cast<std::chrono::milliseconds>(msg.time.time_since_epoch())
                .count());
        std::string line = "{\"time\":\"";
        line += ts;
        line += "\",\"level\":";
        auto level = spdlog::level::to_string_view(msg.level);
        json_quote(line, std::string_view(level.data(), level.size()));
        line += ",\"pid\":" + std::to_string(::getpid()) + ",\"msg\":";
        json_quote(line, std::string_view(msg.payload.data(), msg.payload.size()));
        line += "}\n";
        writer().write_line(line);
    }
    void flush_() override { writer().flush_some(); }
};

// Under a peer's name, lines look like the peer's: "[WARN  tini (PID)] ..." (INFO, DEBUG and
// TRACE on stdout, WARN and FATAL on stderr, as tini prints them) or "[dumb-init] ..." on stderr.
class PeerSink final : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
  public:
    explicit PeerSink(CompatMode mode) : mode_(mode) {}

  protected:
    void sink_it_(const spdlog::details::log_msg& msg) override {
        // Through the non-blocking writers, as every other log line: tini's and dumb-init's own
        // fprintf blocks on a full pipe, and lastcall under their names hung with it
        // (`--compat tini -vvv` with a stalled log pipe never stopped its child).
        std::string text = printable(std::string_view(msg.payload.data(), msg.payload.size()));
        if (mode_ == CompatMode::DumbInit) {
            writer().write_line("[dumb-init] " + text + "\n");
            return;
        }
        const char* level = "FATAL";
        LineWriter* out = &writer();
        switch (msg.level) {
            case spdlog::level::trace:
                level = "TRACE";
                out = &out_writer();
                break;
            case spdlog::level::debug:
                level = "DEBUG";
                out = &out_writer();
                break;
            case spdlog::level::info:
                level = "INFO ";
                out = &out_writer();
                break;
            case spdlog::level::warn:
                level = "WARN ";
                break;
            default:
                break;
        }
        out->write_line(std::string("[") + level + " tini (" + std::to_string(::getpid()) + ")] " +
                        text + "\n");
    }
    void flush_() override {
        writer().flush_some();
        out_writer().flush_some();
    }

  private:
    CompatMode mode_;
};

// journald's native protocol, spoken directly: one datagram per line to its socket. Linking
// libsystemd for sd_journal_send would load it and its six dependencies into every run, also the
// ones that never log to the journal; this costs nothing until the first line.
class JournalSink final : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
  public:
    explicit JournalSink(std::string socket_path) : path_(std::move(socket_path)) {}

  protected:
    void sink_it_(const spdlog::details::log_msg& msg) override {
        std::string entry = journal_entry(syslog_priority(msg.level),
                                          std::string_view(msg.payload.data(), msg.payload.size()));
        if (!fd_) fd_.reset(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        if (fd_ && path_.size() < sizeof addr.sun_path) {
            path_.copy(addr.sun_path, path_.size());
            if (::sendto(fd_.get(), entry.data(), entry.size(), MSG_NOSIGNAL,
                         reinterpret_cast<const sockaddr*>(&addr), sizeof addr) >= 0)
                return;
        }
        // journald gone or the line too long for one datagram: stderr still reaches it.
        // journalctl shows a field with control characters as a blob; a terminal on stderr
        // would obey them: escaped here, as the text sink does.
        std::string line =
            "lastcall: " + printable(std::string_view(msg.payload.data(), msg.payload.size())) +
            "\n";
        std::fwrite(line.data(), 1, line.size(), stderr);
    }
    void flush_() override {}

  private:
    static int syslog_priority(spdlog::level::level_enum l) {
        switch (l) {
            case spdlog::level::critical:
                return 2;
            case spdlog::level::err:
                return 3;
            case spdlog::level::warn:
                return 4;
            case spdlog::level::info:
                return 6;
            default:
                return 7;
        }
    }
    std::string path_;
    UniqueFd fd_;
};

}  // namespace

std::string journal_entry(int priority, std::string_view message) {
    std::string out = "PRIORITY=" + std::to_string(priority) + "\nSYSLOG_IDENTIFIER=lastcall\n";
    if (message.find('\n') == std::string_view::npos) {
        out += "MESSAGE=";
        out += message;
    } else {
        // A value with a newline is sent as the name, a newline, its length as 64-bit little
        // endian, then the bytes.
        out += "MESSAGE\n";
        std::uint64_t n = message.size();
        for (int i = 0; i < 8; ++i) out += static_cast<char>((n >> (8 * i)) & 0xff);
        out += message;
    }
    out += '\n';
    return out;
}

spdlog::sink_ptr make_journal_sink(const std::string& socket_path) {
    return std::make_shared<JournalSink>(socket_path);
}

bool journal_stream_matches(const char* journal_stream, int fd) {
    if (!journal_stream) return false;
    unsigned long long dev = 0, ino = 0;
    char extra;
    if (std::sscanf(journal_stream, "%llu:%llu%c", &dev, &ino, &extra) != 2) return false;
    struct stat st {};
    if (::fstat(fd, &st) != 0) return false;
    return static_cast<unsigned long long>(st.st_dev) == dev &&
           static_cast<unsigned long long>(st.st_ino) == ino;
}

std::uint64_t log_lines_lost() {
    return writer().lost() + out_writer().lost();
}

std::uint64_t log_lines_waiting() {
    return writer().waiting() + out_writer().waiting();
}

void flush_log_backlog(std::chrono::milliseconds max_wait) {
    out_writer().flush(max_wait / 2);
    writer().flush(max_wait / 2);
}

namespace {
std::shared_ptr<spdlog::logger>& peer_logger() {
    static std::shared_ptr<spdlog::logger> logger;
    return logger;
}
}  // namespace

void setup_logging(const LogSettings& options) {
    writer().open();
    std::shared_ptr<spdlog::logger> logger;
    spdlog::sink_ptr journal;
    // journald stores the priority and identifier as fields; a formatted line would bury them.
    if (journal_stream_matches(std::getenv("JOURNAL_STREAM"), STDERR_FILENO))
        journal = make_journal_sink("/run/systemd/journal/socket");
    if (journal) {
        logger = std::make_shared<spdlog::logger>("lastcall", journal);
    } else if (options.peer != CompatMode::None && options.format == LogFormat::Text) {
        out_writer().open();  // only a peer's contract writes lastcall's lines on stdout
        logger =
            std::make_shared<spdlog::logger>("lastcall", std::make_shared<PeerSink>(options.peer));
    } else if (options.format == LogFormat::Json) {
        logger = std::make_shared<spdlog::logger>("lastcall", std::make_shared<JsonStderrSink>());
    } else {
        logger = std::make_shared<spdlog::logger>("lastcall", std::make_shared<TextStderrSink>());
        // Local time with its offset: a line stamped 03:56:22 beside a fire time written
        // 03:00:00Z read as the past; with +01:00 both say where they stand.
        logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e%z lastcall[%P] %l: %v");
    }
    // Every line is flushed: lastcall logs little, and a line lost in a buffer when the container
    // is killed is exactly the line someone needs.
    logger->flush_on(spdlog::level::trace);
    peer_logger() = nullptr;
    if (!options.own_level.empty()) {
        auto peer = logger->clone("peer");
        peer->set_level(spdlog::level::from_str(options.level));
        peer_logger() = std::move(peer);
        logger->set_level(spdlog::level::from_str(options.own_level));
    } else {
        logger->set_level(spdlog::level::from_str(options.level));
    }
    spdlog::set_default_logger(logger);
}

spdlog::logger& peer_log() {
    auto& peer = peer_logger();
    return peer ? *peer : *spdlog::default_logger_raw();
}

}  // namespace lastcall
