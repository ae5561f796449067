// SPDX-License-Identifier: Apache-2.0
#include <catch2/catch.hpp>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "lastcall/cli/cli.hpp"
#include "lastcall/cli/cli11_app.hpp"

using namespace lastcall;

namespace {

Options parse(std::vector<std::string> args) {
    auto parsed = parse_command_line(args);
    REQUIRE(parsed.options);
    return *parsed.options;
}

void check_same(const Options& a, const Options& b) {
    CHECK(a.command == b.command);
    CHECK(a.grace == b.grace);
    CHECK(a.drain_delay == b.drain_delay);
    CHECK(a.coalesce == b.coalesce);
    CHECK(a.stop_signal == b.stop_signal);
    CHECK(a.pdeathsig == b.pdeathsig);
    CHECK(a.kill_scope == b.kill_scope);
    CHECK(a.forward_to == b.forward_to);
    CHECK(a.tracker == b.tracker);
    CHECK(a.log_level == b.log_level);
    CHECK(a.log_format == b.log_format);
    CHECK(a.ready_on == b.ready_on);
    CHECK(a.rewrite == b.rewrite);
    CHECK(a.success_exits == b.success_exits);
    CHECK(a.new_session == b.new_session);
    CHECK(a.config_path == b.config_path);
    CHECK(a.ready_file == b.ready_file);
    CHECK(a.pre_stop == b.pre_stop);
    CHECK(a.user == b.user);
}

}  // namespace

TEST_CASE("a command line without options gives the same options as CLI11's defaults", "[cli]") {
    // --log-format text is the default: passing it forces the CLI11 parser, which must agree
    // with the shortcut taken when there is no option at all.
    Options full = parse({"lastcall", "--log-format", "text", "--", "sleep", "-x", "--", "60"});
    check_same(parse({"lastcall", "--", "sleep", "-x", "--", "60"}), full);
    check_same(parse({"lastcall", "sleep", "-x", "--", "60"}), full);
    CHECK(full.command == std::vector<std::string>{"sleep", "-x", "--", "60"});
}

TEST_CASE("a bare -- without a command is still a usage error", "[cli]") {
    std::FILE* saved = stderr;
    char* buf = nullptr;
    std::size_t len = 0;
    stderr = ::open_memstream(&buf, &len);
    auto parsed = parse_command_line({"lastcall", "--"});
    std::fclose(stderr);
    stderr = saved;
    std::string err(buf, len);
    std::free(buf);
    CHECK_FALSE(parsed.options);
    CHECK(parsed.exit_code == 2);
    CHECK(err.find("no command given") != std::string::npos);
}

TEST_CASE("each spelling of an option is parsed although only the options named are built",
          "[cli]") {
    Options o = parse({"lastcall", "--grace=5s", "-vv", "--kill-scope", "group", "--success-exit=3",
                       "--rewrite", "TERM:INT", "--", "sleep", "1"});
    CHECK(o.grace == std::chrono::seconds(5));
    CHECK(o.log_level == "trace");
    CHECK(o.kill_scope == Scope::Group);
    CHECK(o.success_exits == std::set<int>{3});
    CHECK(o.rewrite.at(SIGTERM) == SIGINT);
    CHECK(o.command == std::vector<std::string>{"sleep", "1"});
    // Options end at the first word that is not one: -v there is the command's.
    Options c = parse({"lastcall", "--tracker", "proc", "sh", "-v", "-c", "true"});
    CHECK(c.tracker == TrackerKind::Proc);
    CHECK(c.log_level == Options{}.log_level);
    CHECK(c.command == std::vector<std::string>{"sh", "-v", "-c", "true"});
}

TEST_CASE("the words a line names decide which options are built, and help builds them all",
          "[cli]") {
    OptionsOnLine line({"lastcall", "-vq", "--grace=5s", "--drain-delay", "1s", "--", "--tracker"});
    CHECK(line("--grace"));
    CHECK(line("-v,--verbose"));
    CHECK(line("-q,--quiet"));
    CHECK(line("--drain-delay"));
    CHECK_FALSE(line("--tracker"));  // after "--": the command's
    CHECK_FALSE(line("--coalesce"));
    CHECK(OptionsOnLine({"lastcall", "--help"})("--tracker"));
    CHECK(OptionsOnLine({"lastcall", "-vh"})("--tracker"));
    CHECK(OptionsOnLine()("--tracker"));
    // A "--" right after an option may be its value: the options go on after it.
    OptionsOnLine value({"lastcall", "--pre-stop", "--", "--grace", "5s", "--", "--tracker"});
    CHECK(value("--grace"));
    CHECK_FALSE(value("--tracker"));
    // After an option that carries its value the -- ends the options.
    CHECK_FALSE(OptionsOnLine({"lastcall", "--grace=5s", "--", "--tracker"})("--tracker"));
}

TEST_CASE("under a peer's name a --compat after an option whose value is -- is still found",
          "[cli]") {
    // lastcall's own --ready-file, its value "--", then --compat: the rest is tini's line.
    auto parsed = parse_command_line({"tini", "--ready-file", "--", "--compat", "tini", "app"});
    REQUIRE(parsed.options);
    CHECK(parsed.options->ready_file == "--");
    CHECK(parsed.options->command == std::vector<std::string>{"app"});
}

TEST_CASE("an option whose value is -- is followed by more options", "[cli]") {
    Options o = parse({"lastcall", "--pre-stop", "--", "--grace", "5s", "-v", "--", "true"});
    CHECK(o.pre_stop == "--");
    CHECK(o.grace == std::chrono::seconds(5));
    CHECK(o.log_level == "debug");
    CHECK(o.command == std::vector<std::string>{"true"});
}
