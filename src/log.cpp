#include "lastcall/log.hpp"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>

#include "lastcall/fd.hpp"
#include "lastcall/json.hpp"

namespace lastcall {

namespace {

// One JSON object per line, for log shippers. spdlog patterns cannot escape a message, so the
// line is built here.
class JsonStderrSink final : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
protected:
    void sink_it_(const spdlog::details::log_msg& msg) override {
        auto secs = std::chrono::system_clock::to_time_t(msg.time);
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(msg.time.time_since_epoch())
                      .count() %
                  1000;
        std::tm tm{};
        ::gmtime_r(&secs, &tm);
        char ts[48];
        std::size_t n = std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
        std::snprintf(ts + n, sizeof ts - n, ".%03dZ", static_cast<int>(ms));
        std::string line = "{\"time\":\"";
        line += ts;
        line += "\",\"level\":";
        auto level = spdlog::level::to_string_view(msg.level);
        json_quote(line, std::string_view(level.data(), level.size()));
        line += ",\"pid\":" + std::to_string(::getpid()) + ",\"msg\":";
        json_quote(line, std::string_view(msg.payload.data(), msg.payload.size()));
        line += "}\n";
        std::fwrite(line.data(), 1, line.size(), stderr);
    }
    void flush_() override { std::fflush(stderr); }
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
        std::string line = "lastcall: " + std::string(msg.payload.data(), msg.payload.size()) + "\n";
        std::fwrite(line.data(), 1, line.size(), stderr);
    }
    void flush_() override {}

private:
    static int syslog_priority(spdlog::level::level_enum l) {
        switch (l) {
            case spdlog::level::critical: return 2;
            case spdlog::level::err: return 3;
            case spdlog::level::warn: return 4;
            case spdlog::level::info: return 6;
            default: return 7;
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

void setup_logging(const Options& options) {
    std::shared_ptr<spdlog::logger> logger;
    spdlog::sink_ptr journal;
    // journald stores the priority and identifier as fields; a formatted line would bury them.
    if (journal_stream_matches(std::getenv("JOURNAL_STREAM"), STDERR_FILENO))
        journal = make_journal_sink("/run/systemd/journal/socket");
    if (journal) {
        logger = std::make_shared<spdlog::logger>("lastcall", journal);
    } else if (options.log_format == LogFormat::Json) {
        logger = std::make_shared<spdlog::logger>("lastcall", std::make_shared<JsonStderrSink>());
    } else {
        logger = std::make_shared<spdlog::logger>(
            "lastcall", std::make_shared<spdlog::sinks::stderr_sink_st>());
        logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e lastcall[%P] %l: %v");
    }
    logger->set_level(spdlog::level::from_str(options.log_level));
    // Every line is flushed: lastcall logs little, and a line lost in a buffer when the container
    // is killed is exactly the line someone needs.
    logger->flush_on(spdlog::level::trace);
    spdlog::set_default_logger(logger);
}

}  // namespace lastcall
