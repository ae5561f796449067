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
