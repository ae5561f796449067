// SPDX-License-Identifier: Apache-2.0
// A real PostgreSQL for the ledger tests: initdb and pg_ctl in a temporary directory, a Unix
// socket only (listen_addresses = ''), started once per test process on first use and stopped
// when it exits. PostgreSQL refuses to run as root, so as root the server runs as nobody.
#pragma once

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lastcall::testing {

class PgServer {
  public:
    // The server of this process, started on the first call; nullptr (and why()) where the
    // PostgreSQL server binaries are not installed or it did not start.
    static PgServer* get() {
        static std::unique_ptr<PgServer> server = start();
        return server.get();
    }
    static const std::string& why() { return failure(); }

    ~PgServer() {
        run_as_owner({bindir_ + "/pg_ctl", "-D", dir_ + "/data", "-m", "immediate", "-w", "stop"});
        std::filesystem::remove_all(dir_);
    }

    // A fresh, empty database on this server, and its URL.
    std::string new_database() {
        std::string name = "t" + std::to_string(++databases_);
        if (run_as_owner({bindir_ + "/createdb", "-h", socket_dir(), "-U", "lastcall", name}) != 0)
            return "";
        return url(name);
    }
    std::string url(const std::string& db) const {
        return "postgresql:///" + db + "?host=" + socket_dir() + "&user=lastcall";
    }
    // psql -c SQL against `db`; its exit status (0: the statement succeeded).
    int psql(const std::string& db, const std::string& sql) const {
        return run_as_owner({bindir_ + "/psql", "-q", "-X", "-v", "ON_ERROR_STOP=1", "-h",
                             socket_dir(), "-U", "lastcall", "-d", db, "-c", sql});
    }
    std::string socket_dir() const { return dir_ + "/sock"; }
    const std::string& bindir() const { return bindir_; }

  private:
    static std::string& failure() {
        static std::string f;
        return f;
    }

    static std::string find_bindir() {
        if (const char* env = std::getenv("LASTCALL_PG_BINDIR"); env && *env) return env;
        std::error_code ec;
        std::string best;
        for (const auto& e : std::filesystem::directory_iterator("/usr/lib/postgresql", ec)) {
            std::string bin = e.path().string() + "/bin";
            if (::access((bin + "/initdb").c_str(), X_OK) == 0 && bin > best) best = bin;
        }
        return best;
    }

    static std::unique_ptr<PgServer> start() {
        std::string bindir = find_bindir();
        if (bindir.empty()) {
            failure() =
                "PostgreSQL server binaries not found (/usr/lib/postgresql/*/bin/initdb; "
                "apt-get install postgresql-15, or set LASTCALL_PG_BINDIR)";
            return nullptr;
        }
        char tmpl[] = "/tmp/lastcall-pg-XXXXXX";
        if (!::mkdtemp(tmpl)) {
            failure() = "mkdtemp failed";
            return nullptr;
        }
        std::unique_ptr<PgServer> s(new PgServer(tmpl, bindir));
        ::mkdir(s->socket_dir().c_str(), 0755);
        if (::geteuid() == 0) {
            struct passwd* pw = ::getpwnam("nobody");
            if (!pw) {
                failure() = "no user nobody to run PostgreSQL as (it refuses root)";
                return nullptr;
            }
            s->uid_ = pw->pw_uid;
            s->gid_ = pw->pw_gid;
            for (const auto& path : {s->dir_, s->socket_dir()})
                if (::chown(path.c_str(), s->uid_, s->gid_) != 0) {
                    failure() = "chown " + path + " failed";
                    return nullptr;
                }
        }
        if (s->run_as_owner({bindir + "/initdb", "-D", s->dir_ + "/data", "-U", "lastcall", "-A",
                             "trust", "--no-sync", "-E", "UTF8"},
                            s->dir_ + "/initdb.log") != 0) {
            failure() = "initdb failed (see " + s->dir_ + "/initdb.log)";
            s->dir_.clear();
            return nullptr;
        }
        // fsync off: the tests check the ledger's rules, not the disk's durability.
        if (s->run_as_owner({bindir + "/pg_ctl", "-D", s->dir_ + "/data", "-l",
                             s->dir_ + "/server.log", "-w", "-t", "60", "-o",
                             "-k " + s->socket_dir() + " -c listen_addresses='' -F", "start"}) !=
            0) {
            failure() = "pg_ctl start failed (see " + s->dir_ + "/server.log)";
            return nullptr;
        }
        return s;
    }

    PgServer(std::string dir, std::string bindir)
        : dir_(std::move(dir)), bindir_(std::move(bindir)) {}

    // Runs argv as the server's owner, stdout and stderr to `log` (default: /dev/null); the
    // exit status.
    int run_as_owner(const std::vector<std::string>& argv,
                     const std::string& log = "/dev/null") const {
        pid_t pid = ::fork();
        if (pid == 0) {
            int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
            if (fd >= 0) {
                ::dup2(fd, 1);
                ::dup2(fd, 2);
            }
            if (uid_ != 0 &&
                (::setgroups(0, nullptr) != 0 || ::setgid(gid_) != 0 || ::setuid(uid_) != 0))
                ::_exit(126);
            std::vector<char*> args;
            for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
            args.push_back(nullptr);
            ::execv(args[0], args.data());
            ::_exit(127);
        }
        int status = 0;
        if (pid < 0 || ::waitpid(pid, &status, 0) != pid) return -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }

    std::string dir_;
    std::string bindir_;
    uid_t uid_ = 0;
    gid_t gid_ = 0;
    int databases_ = 0;
};

}  // namespace lastcall::testing
