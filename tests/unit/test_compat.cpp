// SPDX-License-Identifier: Apache-2.0
#include <signal.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "lastcall/cli/compat.hpp"

using namespace lastcall;

namespace {

// Captures what a parser prints, so that messages can be checked and do not reach the test log.
struct Captured {
    char* out_buf = nullptr;
    char* err_buf = nullptr;
    std::size_t out_len = 0, err_len = 0;
    std::FILE* out = ::open_memstream(&out_buf, &out_len);
    std::FILE* err = ::open_memstream(&err_buf, &err_len);
    ~Captured() {
        close();
        std::free(out_buf);
        std::free(err_buf);
    }
    void close() {
        if (out) std::fclose(out);
        if (err) std::fclose(err);
        out = err = nullptr;
    }
    CompatOutput io() { return {out, err}; }
    std::string stdout_text() {
        close();
        return out_buf ? out_buf : "";
    }
    std::string stderr_text() {
        close();
        return err_buf ? err_buf : "";
    }
};

EnvLookup env_of(std::map<std::string, std::string> vars) {
    return [vars](const std::string& name) -> std::optional<std::string> {
        auto it = vars.find(name);
        if (it == vars.end()) return std::nullopt;
        return it->second;
    };
}

const EnvLookup kNoEnv = env_of({});

}  // namespace

TEST_CASE("the invocation name selects the compat mode", "[compat]") {
    CHECK(compat_mode_for_program("tini") == CompatMode::Tini);
    CHECK(compat_mode_for_program("/usr/bin/docker-init") == CompatMode::Tini);
    CHECK(compat_mode_for_program("./dumb-init") == CompatMode::DumbInit);
    CHECK_FALSE(compat_mode_for_program("lastcall"));
    CHECK_FALSE(compat_mode_for_program("/opt/tini/lastcall"));
    CHECK_FALSE(compat_mode_for_program("tini-static"));
}

TEST_CASE("tini defaults: child only, no setsid, warnings only", "[compat][tini]") {
    Captured c;
    auto p = parse_tini({"tini", "--", "app", "-x"}, kNoEnv, c.io());
    REQUIRE(p.options);
    const Options& o = *p.options;
    CHECK(o.command == std::vector<std::string>{"app", "-x"});
    CHECK(o.forward_to == Scope::Child);
    CHECK(o.kill_scope == Scope::Child);
    CHECK_FALSE(o.new_session);
    CHECK(o.log_level == "warn");
    CHECK(o.warn_implicit_subreaper);
    CHECK_FALSE(o.warn_on_reap);
    CHECK(o.pdeathsig == 0);
    CHECK(o.success_exits.empty());
}

TEST_CASE("tini flags map onto the options", "[compat][tini]") {
    Captured c;
    auto p = parse_tini(
        {"tini", "-s", "-g", "-w", "-vv", "-p", "SIGKILL", "-e", "143", "-e", "3", "--", "app"},
        kNoEnv, c.io());
    REQUIRE(p.options);
    const Options& o = *p.options;
    CHECK(o.forward_to == Scope::Group);
    CHECK(o.kill_scope == Scope::Group);
    CHECK(o.warn_on_reap);
    CHECK_FALSE(o.warn_implicit_subreaper);
    CHECK(o.log_level == "debug");
    CHECK(o.pdeathsig == 0);  // -p is lastcall's own parent-death signal, not the child's
    CHECK(o.self_pdeathsig == SIGKILL);
    CHECK(o.success_exits == std::set<int>{3, 143});
}

TEST_CASE("tini permutes options after the program until --", "[compat][tini]") {
    Captured c;
    auto p = parse_tini({"tini", "echo", "-w", "hi", "--", "-g"}, kNoEnv, c.io());
    REQUIRE(p.options);
    CHECK(p.options->warn_on_reap);
    CHECK(p.options->forward_to == Scope::Child);
    CHECK(p.options->command == std::vector<std::string>{"echo", "hi", "-g"});
}

TEST_CASE("tini environment: subreaper, process group, verbosity replaces -v", "[compat][tini]") {
    Captured c;
    auto p = parse_tini(
        {"tini", "-vvv", "app"},
        env_of({{"TINI_SUBREAPER", ""}, {"TINI_KILL_PROCESS_GROUP", "1"}, {"TINI_VERBOSITY", "0"}}),
        c.io());
    REQUIRE(p.options);
    CHECK_FALSE(p.options->warn_implicit_subreaper);
    CHECK(p.options->forward_to == Scope::Group);
    CHECK(p.options->log_level == "error");
}

TEST_CASE("tini verbosity levels", "[compat][tini]") {
    CHECK(tini_log_level(0) == "error");
    CHECK(tini_log_level(1) == "warn");
    CHECK(tini_log_level(2) == "info");
    CHECK(tini_log_level(3) == "debug");
    CHECK(tini_log_level(4) == "trace");
    CHECK(tini_log_level(-3) == "error");
}

TEST_CASE("tini usage errors exit 1 with tini's own text", "[compat][tini]") {
    auto args = GENERATE(
        std::vector<std::string>{"tini", "-x", "app"}, std::vector<std::string>{"tini", "-p"},
        std::vector<std::string>{"tini", "-p", "TERM", "app"},
        std::vector<std::string>{"tini", "-p", "SIGRTMIN", "app"},
        std::vector<std::string>{"tini", "-e", "256", "app"},
        std::vector<std::string>{"tini", "-e", "-1", "app"},
        std::vector<std::string>{"tini", "-e", "4x", "app"}, std::vector<std::string>{"tini", "-s"},
        std::vector<std::string>{"tini", "--version", "app"});
    Captured c;
    auto p = parse_tini(args, kNoEnv, c.io());
    CHECK_FALSE(p.options);
    CHECK(p.exit_code == 1);
    std::string err = c.stderr_text();
    // getopt's line and the usage, the usage alone, or tini's FATAL line for -p and -e.
    bool known = err.rfind("tini: ", 0) == 0 || err.rfind("tini (tini version 0.19.0)\n", 0) == 0 ||
                 err.rfind("[FATAL tini (", 0) == 0;
    CHECK(known);
    CHECK(c.stdout_text().empty());
}

TEST_CASE("tini --version alone, -h and -l print on stdout and exit 0", "[compat][tini]") {
    Captured v;
    auto p = parse_tini({"docker-init", "--version"}, kNoEnv, v.io());
    CHECK((!p.options && p.exit_code == 0));
    CHECK(v.stdout_text() == "tini version 0.19.0\n");
    Captured h;
    p = parse_tini({"tini", "-h"}, kNoEnv, h.io());
    CHECK((!p.options && p.exit_code == 0));
    CHECK(h.stdout_text().find("-e EXIT_CODE") != std::string::npos);
    Captured l;
    p = parse_tini({"tini", "-l"}, kNoEnv, l.io());
    CHECK((!p.options && p.exit_code == 0));
    CHECK(l.stderr_text().empty());
}

TEST_CASE("dumb-init defaults: setsid, whole group, exec failure exits 2", "[compat][dumb-init]") {
    Captured c;
    auto p = parse_dumb_init({"dumb-init", "sh", "-c", "exit 3"}, kNoEnv, c.io());
    REQUIRE(p.options);
    const Options& o = *p.options;
    CHECK(o.command == std::vector<std::string>{"sh", "-c", "exit 3"});
    CHECK(o.new_session);
    CHECK(o.forward_to == Scope::Group);
    CHECK(o.kill_scope == Scope::Group);
    CHECK(o.exec_failure_exit == 2);
    CHECK(o.log_level == "warn");
    // setsid mode: the terminal stop signals become SIGSTOP for the (orphaned) child group.
    CHECK(o.rewrite ==
          std::map<int, int>{{SIGTSTP, SIGSTOP}, {SIGTTIN, SIGSTOP}, {SIGTTOU, SIGSTOP}});
    CHECK(o.forward_termination);
}

TEST_CASE("dumb-init flags: single child, rewrites, verbose", "[compat][dumb-init]") {
    Captured c;
    auto p = parse_dumb_init(
        {"dumb-init", "-c", "-r", "15:3", "--rewrite=1:0", "--rewrite", "10:12", "-v", "app"},
        kNoEnv, c.io());
    REQUIRE(p.options);
    const Options& o = *p.options;
    CHECK_FALSE(o.new_session);
    CHECK(o.forward_to == Scope::Child);
    CHECK(o.rewrite == std::map<int, int>{{1, 0}, {10, 12}, {15, 3}});
    CHECK(o.log_level == "debug");
}

TEST_CASE("dumb-init environment: DUMB_INIT_SETSID=0 and DUMB_INIT_DEBUG=1 only",
          "[compat][dumb-init]") {
    Captured c;
    auto p = parse_dumb_init({"dumb-init", "app"},
                             env_of({{"DUMB_INIT_SETSID", "0"}, {"DUMB_INIT_DEBUG", "1"}}), c.io());
    REQUIRE(p.options);
    CHECK_FALSE(p.options->new_session);
    CHECK(p.options->forward_to == Scope::Child);
    CHECK(p.options->log_level == "debug");
    p = parse_dumb_init({"dumb-init", "app"},
                        env_of({{"DUMB_INIT_SETSID", "no"}, {"DUMB_INIT_DEBUG", "true"}}), c.io());
    REQUIRE(p.options);
    CHECK(p.options->new_session);
    CHECK(p.options->log_level == "warn");
}

TEST_CASE("dumb-init usage errors exit 1 with dumb-init's own text", "[compat][dumb-init]") {
    auto args = GENERATE(std::vector<std::string>{"dumb-init", "-x", "app"},
                         std::vector<std::string>{"dumb-init", "--nope", "app"},
                         std::vector<std::string>{"dumb-init", "-r"},
                         std::vector<std::string>{"dumb-init", "--rewrite"},
                         std::vector<std::string>{"dumb-init", "-r", "15", "app"},
                         std::vector<std::string>{"dumb-init", "-r", "0:3", "app"},
                         std::vector<std::string>{"dumb-init", "-r", "32:1", "app"},
                         std::vector<std::string>{"dumb-init", "-r", "15:32", "app"},
                         std::vector<std::string>{"dumb-init", "-c"});
    Captured c;
    auto p = parse_dumb_init(args, kNoEnv, c.io());
    CHECK_FALSE(p.options);
    CHECK(p.exit_code == 1);
    std::string err = c.stderr_text();
    bool known = err.rfind("dumb-init: ", 0) == 0 || err.rfind("Usage: -r option takes", 0) == 0 ||
                 err.rfind("Usage: dumb-init [option] program [args]\n", 0) == 0;
    CHECK(known);
}

TEST_CASE("dumb-init --version and --help print on stderr and exit 0", "[compat][dumb-init]") {
    Captured v;
    auto p = parse_dumb_init({"dumb-init", "--version"}, kNoEnv, v.io());
    CHECK((!p.options && p.exit_code == 0));
    CHECK(v.stderr_text().rfind("dumb-init v1.2.5", 0) == 0);
    Captured h;
    p = parse_dumb_init({"dumb-init", "-h", "app"}, kNoEnv, h.io());
    CHECK((!p.options && p.exit_code == 0));
    CHECK(h.stdout_text().empty());
}

TEST_CASE("the native command line is not a compat one", "[compat]") {
    CHECK_FALSE(parse_compat_command_line({"lastcall", "--grace", "1s", "--", "tini"}));
    CHECK_FALSE(parse_compat_command_line({"lastcall"}));
}

TEST_CASE("the invocation name and --compat work alone and together", "[compat]") {
    for (auto args :
         {std::vector<std::string>{"/sbin/tini", "-g", "app"},
          std::vector<std::string>{"lastcall", "--compat", "tini", "-g", "app"},
          std::vector<std::string>{"/sbin/tini", "--compat", "tini", "-g", "app"},
          std::vector<std::string>{"docker-init", "--compat=tini", "-g", "app"},
          std::vector<std::string>{"lastcall", "--compat", "docker-init", "-g", "app"}}) {
        auto p = parse_compat_command_line(args);
        REQUIRE(p);
        REQUIRE(p->options);
        CHECK(p->options->compat == CompatMode::Tini);
        CHECK(p->options->forward_to == Scope::Group);
        CHECK(p->options->command == std::vector<std::string>{"app"});
    }
    auto p = parse_compat_command_line({"dumb-init", "--compat", "dumb-init", "-c", "app"});
    REQUIRE((p && p->options));
    CHECK(p->options->compat == CompatMode::DumbInit);
    CHECK(p->options->forward_to == Scope::Child);
}

TEST_CASE(
    "compat modes forward termination signals, and lastcall's own drain flags before --compat "
    "turn its shutdown back on",
    "[compat]") {
    auto p = parse_command_line({"lastcall", "--compat", "tini", "app"});
    REQUIRE(p.options);
    CHECK(p.options->forward_termination);
    p = parse_command_line({"lastcall", "--report", "/tmp/r.json", "--compat", "tini", "app"});
    REQUIRE(p.options);
    CHECK(p.options->forward_termination);
    CHECK(p.options->report_path == "/tmp/r.json");
    p = parse_command_line({"lastcall", "--grace", "3s", "--compat=dumb-init", "-c", "app"});
    REQUIRE(p.options);
    CHECK_FALSE(p.options->forward_termination);
    CHECK(p.options->grace == std::chrono::seconds(3));
    CHECK(p.options->forward_to == Scope::Child);
    p = parse_command_line({"tini", "--pre-stop", "true", "--compat", "tini", "app"});
    REQUIRE(p.options);
    CHECK_FALSE(p.options->forward_termination);
    CHECK(p.options->grace == std::chrono::seconds(8));  // lastcall's own budget, not tini's 0
}

TEST_CASE("a user given before --compat runs the command as that user, not as root", "[compat]") {
    for (const char* peer : {"tini", "dumb-init"}) {
        auto p = parse_command_line({"lastcall", "--user", "65534:65534", "--compat", peer, "id"});
        REQUIRE(p.options);
        REQUIRE(p.options->credentials);
        CHECK(p.options->credentials->uid == 65534);
        CHECK(p.options->credentials->gid == 65534);
    }
}

TEST_CASE("services and jobs given before --compat tini are stopped within lastcall's grace",
          "[compat]") {
    auto p = parse_command_line({"lastcall", "--config", "/tmp/s.toml", "--compat", "tini", "app"});
    REQUIRE(p.options);
    CHECK(p.options->forward_termination);  // signals still go to the command, as tini's do
    CHECK(p.options->grace == std::chrono::seconds(8));
    p = parse_command_line({"lastcall", "--crontab", "/tmp/c", "--compat", "tini", "app"});
    REQUIRE(p.options);
    CHECK(p.options->grace == std::chrono::seconds(8));
    p = parse_command_line(
        {"lastcall", "--config", "/tmp/s.toml", "--grace", "2s", "--compat", "tini", "app"});
    REQUIRE(p.options);
    CHECK(p.options->grace == std::chrono::seconds(2));
}
