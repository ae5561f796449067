#include "lastcall/core/log.hpp"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <sys/stat.h>
#include <unistd.h>
#ifndef LASTCALL_NO_LIBSYSTEMD
#include <spdlog/sinks/systemd_sink.h>
#endif

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>

#include "lastcall/core/json.hpp"
#include "lastcall/core/timefmt.hpp"

namespace lastcall {

namespace {

// One JSON object per line, for log shippers. spdlog patterns cannot escape a message, so the
// line is built here.
class JsonStderrSink final : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
protected:
    void sink_it_(const spdlog::details::log_msg& msg) override {
        std::string ts = iso_utc_ms(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        msg.time.time_since_epoch())
                                        .count());
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

// Under a peer's name, lines look like the peer's: "[WARN  tini (PID)] ..." (INFO, DEBUG and
// TRACE on stdout, WARN and FATAL on stderr, as tini prints them) or "[dumb-init] ..." on stderr.
class PeerSink final : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
  public:
    explicit PeerSink(CompatMode mode) : mode_(mode) {}

  protected:
    void sink_it_(const spdlog::details::log_msg& msg) override {
        std::string_view text(msg.payload.data(), msg.payload.size());
        if (mode_ == CompatMode::DumbInit) {
            std::fprintf(stderr, "[dumb-init] %.*s\n", static_cast<int>(text.size()), text.data());
            return;
        }
        const char* level = "FATAL";
        std::FILE* out = stderr;
        switch (msg.level) {
            case spdlog::level::trace:
                level = "TRACE";
                out = stdout;
                break;
            case spdlog::level::debug:
                level = "DEBUG";
                out = stdout;
                break;
            case spdlog::level::info:
                level = "INFO ";
                out = stdout;
                break;
            case spdlog::level::warn:
                level = "WARN ";
                break;
            default:
                break;
        }
        std::fprintf(out, "[%s tini (%d)] %.*s\n", level, static_cast<int>(::getpid()),
                     static_cast<int>(text.size()), text.data());
    }
    void flush_() override {
        std::fflush(stdout);
        std::fflush(stderr);
    }

  private:
    CompatMode mode_;
};

}  // namespace

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
#ifndef LASTCALL_NO_LIBSYSTEMD
    // journald stores the priority and identifier as fields; a formatted line would bury them.
    if (journal_stream_matches(std::getenv("JOURNAL_STREAM"), STDERR_FILENO))
        journal = std::make_shared<spdlog::sinks::systemd_sink_st>("lastcall");
#endif
    if (journal) {
        logger = std::make_shared<spdlog::logger>("lastcall", journal);
    } else if (options.compat != CompatMode::None && options.log_format == LogFormat::Text) {
        logger = std::make_shared<spdlog::logger>("lastcall",
                                                  std::make_shared<PeerSink>(options.compat));
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
