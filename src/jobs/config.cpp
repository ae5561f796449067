// SPDX-License-Identifier: Apache-2.0
// [jobs.*] and top-level keys of the TOML config, and how a run finds its state directory
// (crontab files: config_crontab.cpp).
#include "lastcall/jobs/config.hpp"
#include "config_internal.hpp"
#include "lastcall/core/read_file.hpp"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <utility>
#include "lastcall/core/safe_path.hpp"
#include "lastcall/core/toml_parse.hpp"
#include "lastcall/jobs/ledger.hpp"
#include "lastcall/process/credentials.hpp"

namespace lastcall {

std::string_view to_string(Overlap o) {
    switch (o) {
        case Overlap::Skip:
            return "skip";
        case Overlap::Queue:
            return "queue";
        case Overlap::Allow:
            return "allow";
        case Overlap::Replace:
            return "replace";
    }
    return "?";
}

std::string_view to_string(OnInterrupted o) {
    switch (o) {
        case OnInterrupted::Retry:
            return "retry";
        case OnInterrupted::CleanupRetry:
            return "cleanup-retry";
        case OnInterrupted::Hold:
            return "hold";
        case OnInterrupted::None:
            return "none";
    }
    return "?";
}

std::optional<OnInterrupted> parse_on_interrupted(std::string_view word) {
    for (auto o : {OnInterrupted::Retry, OnInterrupted::CleanupRetry, OnInterrupted::Hold,
                   OnInterrupted::None})
        if (word == to_string(o)) return o;
    return std::nullopt;
}

std::string staging_path_for(const std::string& output, std::int64_t run_id) {
    auto slash = output.rfind('/');
    std::string dir = output.substr(0, slash + 1);
    return dir + "." + output.substr(slash + 1) + "." + std::to_string(run_id) +
           ".lastcall-staging";
}

bool is_staging_name_of(const std::string& output, const std::string& name) {
    std::string prefix = "." + output.substr(output.rfind('/') + 1) + ".";
    std::string_view suffix = "lastcall-staging";
    if (name.size() < prefix.size() + suffix.size() || !name.starts_with(prefix) ||
        !name.ends_with(suffix))
        return false;
    // Between them: a run id and a dot, or nothing (the name before per-run staging).
    std::string_view mid(name.data() + prefix.size(), name.size() - prefix.size() - suffix.size());
    if (mid.empty()) return true;
    if (mid.back() != '.') return false;
    mid.remove_suffix(1);
    if (mid.empty()) return false;
    for (char c : mid)
        if (c < '0' || c > '9') return false;
    return true;
}

std::string default_state_dir() {
    if (::geteuid() == 0) return "/var/lib/lastcall";
    if (const char* xdg = std::getenv("XDG_STATE_HOME"); xdg && *xdg == '/')
        return std::string(xdg) + "/lastcall";
    if (const char* home = std::getenv("HOME"); home && *home)
        return std::string(home) + "/.local/state/lastcall";
    return "/tmp/lastcall-state-" + std::to_string(::geteuid());
}

bool valid_job_name(std::string_view name) {
    return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '_' || c == '-' || c == '.';
    });
}

Error config_error_at(const std::string& path, long line, std::string_view key,
                      const std::string& message) {
    return Error{path + ":" + std::to_string(line) + ": " + std::string(key) + ": " + message};
}

namespace {

Error at(const std::string& path, long line, std::string_view key, const std::string& message) {
    return config_error_at(path, line, key, message);
}

Error at(const std::string& path, const toml::node& n, std::string_view key,
         const std::string& message) {
    return at(path, static_cast<long>(n.source().begin.line), key, message);
}

// A command: an argv array of strings, or one string for /bin/sh -c.
Result<std::vector<std::string>> get_command(const std::string& path, const toml::node& n,
                                             const std::string& key) {
    if (auto s = n.value_exact<std::string>()) {
        if (s->empty()) return at(path, n, key, "must not be empty");
        return std::vector<std::string>{"/bin/sh", "-c", *s};
    }
    const toml::array* arr = n.as_array();
    if (!arr) return at(path, n, key, "expected a string or an array of strings");
    std::vector<std::string> argv;
    for (const auto& item : *arr) {
        auto s = item.value_exact<std::string>();
        if (!s) return at(path, item, key, "expected an array of strings");
        argv.push_back(*s);
    }
    if (argv.empty() || argv.front().empty()) return at(path, n, key, "must not be empty");
    return argv;
}

// The keys of a [jobs.NAME] table that the checks after the keys look back at.
struct JobNodes {
    const toml::node* schedule = nullptr;
    const toml::node* output = nullptr;
    const toml::node* overlap = nullptr;
};

Status parse_timeout(const std::string& path, const toml::node& v, const std::string& full,
                     JobSpec& job) {
    auto s = v.value_exact<std::string>();
    if (!s) return at(path, v, full, "expected a duration string such as \"30s\"");
    auto d = parse_duration(*s);
    if (!d) return at(path, v, full, d.error().message);
    if (d->count() <= 0) return at(path, v, full, "must be above 0");
    job.timeout = *d;
    return Ok{};
}

// `overlap` (lastcall's words) or `concurrency` (Kubernetes' CronJob words): one setting.
Status parse_overlap(const std::string& path, const toml::node& v, const std::string& full,
                     bool k8s, JobSpec& job, JobNodes& nodes) {
    if (nodes.overlap)
        return at(path, v, full,
                  "give `overlap` or `concurrency`, not both (they are one setting)");
    auto s = v.value_exact<std::string>();
    if (s == (k8s ? "forbid" : "skip"))
        job.overlap = Overlap::Skip;
    else if (!k8s && s == "queue")
        job.overlap = Overlap::Queue;
    else if (s == "allow")
        job.overlap = Overlap::Allow;
    else if (s == "replace")
        job.overlap = Overlap::Replace;
    else
        return at(path, v, full,
                  k8s ? "expected \"forbid\", \"allow\" or \"replace\""
                      : "expected \"skip\", \"queue\", \"allow\" or \"replace\"");
    nodes.overlap = &v;
    return Ok{};
}

Status parse_output(const std::string& path, const toml::node& v, const std::string& full,
                    JobSpec& job) {
    auto s = v.value_exact<std::string>();
    if (!s || s->empty()) return at(path, v, full, "expected a file path");
    if (s->front() != '/') return at(path, v, full, "must be an absolute path");
    if (s->back() == '/') return at(path, v, full, "must name a file, not a directory");
    job.output = *s;
    return Ok{};
}

Status parse_job_credentials(const std::string& path, const toml::node& v, const std::string& full,
                             bool group, JobSpec& job) {
    auto s = v.value_exact<std::string>();
    if (!s)
        return at(
            path, v, full,
            group ? "expected a group name or id" : "expected a user name or id, USER[:GROUP]");
    if (group) {
        auto gid = parse_group(*s, system_userdb());
        if (!gid) return at(path, v, full, gid.error().message);
        job.group = *gid;
        return Ok{};
    }
    auto creds = lookup_credentials(*s);
    if (!creds) return at(path, v, full, creds.error().message);
    job.user = std::move(*creds);
    return Ok{};
}

// The keys that hold a command: the job's own, and its output's `verify`.
Status parse_job_command(const std::string& path, const toml::node& v, const std::string& full,
                         bool verify, JobSpec& job) {
    auto argv = get_command(path, v, full);
    if (!argv) return argv.error();
    if (!verify) {
        job.command = std::move(*argv);
        return Ok{};
    }
    // A shell string sees the staged path as $1 ("verify" is its $0).
    if (argv->size() == 3 && (*argv)[0] == "/bin/sh") argv->push_back("verify");
    job.verify = std::move(*argv);
    return Ok{};
}

// One key of [jobs.NAME] into the spec.
Status parse_job_key(const std::string& path, const std::string& key, const toml::node& v,
                     const std::string& full, const cron::TimeZone* zone, JobSpec& job,
                     JobNodes& nodes) {
    if (key == "schedule") {
        auto s = v.value_exact<std::string>();
        if (!s) return at(path, v, full, "expected a cron expression string");
        auto sched = cron::parse(*s, zone);
        if (!sched) return at(path, v, full, sched.error().message);
        job.schedule = std::move(*sched);
        nodes.schedule = &v;
        return Ok{};
    }
    if (key == "command" || key == "verify")
        return parse_job_command(path, v, full, key == "verify", job);
    if (key == "timeout") return parse_timeout(path, v, full, job);
    if (key == "overlap" || key == "concurrency")
        return parse_overlap(path, v, full, key == "concurrency", job, nodes);
    if (key == "on_interrupted") {
        auto s = v.value_exact<std::string>();
        auto policy = s ? parse_on_interrupted(*s) : std::nullopt;
        if (!policy) return at(path, v, full, kOnInterruptedWords);
        job.on_interrupted = *policy;
        return Ok{};
    }
    if (key == "output") {
        nodes.output = &v;
        return parse_output(path, v, full, job);
    }
    if (key == "user" || key == "group")
        return parse_job_credentials(path, v, full, key == "group", job);
    return at(path, v, full, "unknown key");
}

// What the keys say together: what is missing, and what cannot be combined.
Status check_job(const std::string& path, long line, const std::string& prefix, const JobSpec& job,
                 const JobNodes& nodes) {
    if (!nodes.schedule) return at(path, line, prefix + "schedule", "missing");
    if (job.command.empty()) return at(path, line, prefix + "command", "missing");
    if (!job.verify.empty() && job.output.empty())
        return at(path, line, prefix + "verify", "needs `output` (it checks the staged output)");
    // Each run stages its own file, but two runs at once would race to promote onto the one
    // final name: the artifact would be whichever finished last, not the latest fire time's.
    if (nodes.output && job.overlap == Overlap::Allow)
        return at(path, *nodes.overlap, prefix + "overlap",
                  "\"allow\" cannot be combined with `output`: concurrent runs would race to "
                  "promote onto the same final file");
    return Ok{};
}

Result<JobSpec> parse_job(const std::string& path, const std::string& name, const toml::table& t,
                          const cron::TimeZone* zone) {
    JobSpec job;
    job.name = name;
    long line = static_cast<long>(t.source().begin.line);
    job.origin = path + ":" + std::to_string(line);
    const std::string prefix = "jobs." + name + ".";
    JobNodes nodes;
    for (const auto& [k, v] : t) {
        std::string key(k.str());
        if (auto st = parse_job_key(path, key, v, prefix + key, zone, job, nodes); !st)
            return st.error();
    }
    if (auto st = check_job(path, line, prefix, job, nodes); !st) return st.error();
    return job;
}

// The [jobs.NAME] tables, in the file's order; no two promoting onto one file.
Status parse_jobs_tables(const std::string& path, const toml::node& jobs,
                         const cron::TimeZone* zone, JobsConfig& config) {
    const toml::table* table = jobs.as_table();
    if (!table) return at(path, jobs, "jobs", "expected tables [jobs.NAME]");
    for (const auto& [k, v] : *table) {
        std::string name(k.str());
        const toml::table* t = v.as_table();
        if (!t) return at(path, v, "jobs." + name, "expected a table [jobs." + name + "]");
        if (!valid_job_name(name))
            return at(path, v, "jobs." + name, "a job name uses only letters, digits, _ . -");
        auto job = parse_job(path, name, *t, zone);
        if (!job) return job.error();
        config.jobs.push_back(std::move(*job));
    }
    // Two jobs promoting onto one final name would overwrite each other's artifact.
    for (std::size_t i = 0; i < config.jobs.size(); ++i)
        for (std::size_t j = 0; j < i; ++j)
            if (!config.jobs[i].output.empty() && config.jobs[i].output == config.jobs[j].output)
                return Error{config.jobs[i].origin + ": jobs." + config.jobs[i].name +
                             ".output: the same file as jobs." + config.jobs[j].name + ".output"};
    // toml++ keeps tables sorted by key; the file's order is what a reader expects.
    std::stable_sort(config.jobs.begin(), config.jobs.end(), [](const auto& a, const auto& b) {
        auto line = [](const std::string& o) { return std::stol(o.substr(o.rfind(':') + 1)); };
        return line(a.origin) < line(b.origin);
    });
    return Ok{};
}

}  // namespace

Result<JobsConfig> parse_jobs_toml(std::string_view text, const std::string& path) {
    auto parsed = parse_toml_document(text, path);
    if (!parsed) return parsed.error();
    toml::table root = std::move(*parsed);
    JobsConfig config;
    std::optional<cron::TimeZone> zone;
    const toml::node* jobs = nullptr;
    for (const auto& [k, v] : root) {
        std::string key(k.str());
        if (key == "services") continue;  // the services loader's
        if (key == "jobs") {
            jobs = &v;
        } else if (key == "state_dir") {
            auto s = v.value_exact<std::string>();
            if (!s || s->empty() || s->front() != '/')
                return at(path, v, key, "expected an absolute directory path");
            config.state_dir = *s;
        } else if (key == "ledger") {
            auto s = v.value_exact<std::string>();
            if (!s || !is_postgresql_url(*s))
                return at(path, v, key,
                          "expected a postgresql:// URL (the default ledger is SQLite in the state "
                          "dir)");
            config.ledger = *s;
        } else if (key == "lease") {
            auto s = v.value_exact<std::string>();
            if (!s) return at(path, v, key, "expected a duration string such as \"30s\"");
            auto d = parse_duration(*s);
            if (!d) return at(path, v, key, d.error().message);
            if (*d < kMinLease) return at(path, v, key, "must be at least 3s");
            config.lease = *d;
        } else if (key == "cluster") {
            auto s = v.value_exact<std::string>();
            if (!s) return at(path, v, key, "expected a name such as \"billing-prod\"");
            if (s->size() > 200 || s->find_first_of("\n\t") != std::string::npos)
                return at(path, v, key, "expected one line of at most 200 characters");
            config.cluster = *s;
        } else if (key == "retention") {
            auto s = v.value_exact<std::string>();
            if (!s) return at(path, v, key, "expected a duration string such as \"30d\"");
            auto d = parse_duration(*s);
            if (!d) return at(path, v, key, d.error().message);
            if (*d < Millis{1000}) return at(path, v, key, "must be at least 1s");
            config.retention = *d;
        } else if (key == "timezone") {
            auto s = v.value_exact<std::string>();
            if (!s) return at(path, v, key, "expected a time zone name such as \"Europe/Berlin\"");
            auto z = cron::TimeZone::load(*s);
            if (!z) return at(path, v, key, z.error().message);
            zone = std::move(*z);
        } else {
            return at(path, v, key, "unknown key");
        }
    }
    if (!jobs) return config;
    if (auto st = parse_jobs_tables(path, *jobs, zone ? &*zone : nullptr, config); !st)
        return st.error();
    return config;
}

Result<JobsConfig> load_jobs_config(const std::string& path) {
    auto text = read_file(path);
    if (!text) return text.error();
    return parse_jobs_toml(*text, path);
}

std::string resolve_state_dir(const std::string& flag, const std::string& from_config,
                              const std::string& unit_file) {
    // Absolute: the ledger's path is also how a restarted lastcall recognises the runs its dead
    // predecessor left behind (LASTCALL_LEDGER in their environment), and the relative text
    // 'state/ledger.sqlite' matched the runs of another lastcall started from another directory:
    // it killed them.
    if (!flag.empty() && flag[0] != '/')
        if (auto cwd = current_dir()) return *cwd + (cwd->size() > 1 ? "/" : "") + flag;
    if (!flag.empty()) return flag;
    if (!from_config.empty()) return from_config;
    // systemd's StateDirectory= (a colon-separated list when it names several): the unit's own.
    if (const char* sd = std::getenv("STATE_DIRECTORY"); sd && *sd == '/')
        return std::string(sd, std::strcspn(sd, ":"));
    if (unit_file.empty()) return default_state_dir();
    return default_state_dir() + "/" + state_dir_name(unit_file);
}

std::string job_commands(const std::vector<JobSpec>& jobs) {
    std::vector<std::string> lines;
    for (const auto& j : jobs) {
        std::string command;
        for (const auto& a : j.command) command += (command.empty() ? "" : " ") + a;
        for (char& c : command)
            if (c == '\n' || c == '\t') c = ' ';
        lines.push_back(j.name + "\t" + command);
    }
    std::sort(lines.begin(), lines.end());
    std::string out;
    for (const auto& l : lines) out += l + "\n";
    return out;
}

std::string cluster_key_of(const std::vector<JobSpec>& jobs) {
    std::vector<std::string> parts;
    for (const auto& j : jobs) {
        std::string part = j.name + '\x1f' + j.schedule->expression();
        for (const auto& a : j.command) part += '\x1f' + a;
        parts.push_back(part);
    }
    std::sort(parts.begin(), parts.end());
    std::uint64_t h = 1469598103934665603ull;  // FNV-1a: the same jobs, the same key anywhere
    for (const auto& part : parts)
        for (unsigned char c : part + '\x1e') h = (h ^ c) * 1099511628211ull;
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
    return "jobs-" + std::string(hex, 8);
}

std::string state_dir_name(const std::string& unit_file) {
    std::string path = real_path(unit_file).value_or(unit_file);
    // FNV-1a of the absolute path: the same file always maps to the same directory, two files
    // (two apps on one host) to two.
    std::uint64_t h = 1469598103934665603ull;
    for (unsigned char c : path) h = (h ^ c) * 1099511628211ull;
    std::string stem = path.substr(path.rfind('/') + 1);
    if (auto dot = stem.rfind('.'); dot != std::string::npos && dot > 0) stem.resize(dot);
    for (char& c : stem)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') c = '_';
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
    return stem + "-" + std::string(hex, 8);
}

Result<JobsSetup> load_jobs(const Options& options, const std::string* config_text) {
    JobsSetup setup;
    std::string config_dir;
    if (!options.config_path.empty()) {
        auto config = config_text ? parse_jobs_toml(*config_text, options.config_path)
                                  : load_jobs_config(options.config_path);
        if (!config) return config.error();
        setup.jobs = std::move(config->jobs);
        config_dir = config->state_dir;
        setup.ledger_url = std::move(config->ledger);
        if (config->lease) setup.lease = *config->lease;
        setup.retention = config->retention;
        setup.cluster = config->cluster;
    }
    if (!options.ledger_url.empty()) {
        if (!is_postgresql_url(options.ledger_url))
            return Error{
                "--ledger: expected a postgresql:// URL (the default ledger is SQLite in "
                "the state dir)"};
        setup.ledger_url = options.ledger_url;
    }
    if (!options.crontab_path.empty()) {
        auto lines = load_crontab(options.crontab_path);
        if (!lines) return lines.error();
        for (auto& job : *lines) {
            for (const auto& other : setup.jobs)
                if (other.name == job.name)
                    return Error{job.origin + ": the crontab entry is named " + job.name +
                                 ", which [jobs." + job.name + "] (" + other.origin +
                                 ") already uses"};
            setup.jobs.push_back(std::move(job));
        }
    }
    // A year field can leave no fire time at all (`0 3 * * * 2020`): refused like a date that
    // never occurs, rather than a job that waits forever in silence.
    const auto now = std::chrono::floor<std::chrono::seconds>(std::chrono::system_clock::now());
    for (const auto& job : setup.jobs)
        if (!job.schedule->next_after(now))
            return Error{job.origin + ": schedule: '" + job.schedule->expression() +
                         "' never fires: every year it names is past"};
    setup.state_dir = resolve_state_dir(
        options.state_dir, config_dir,
        !options.config_path.empty() ? options.config_path : options.crontab_path);
    // A queue is one lastcall's memory: replicas cannot share it.
    if (!setup.ledger_url.empty())
        for (const auto& job : setup.jobs)
            if (job.overlap == Overlap::Queue)
                return Error{job.origin + ": jobs." + job.name +
                             ".overlap: \"queue\" needs one machine; with a shared ledger use "
                             "concurrency = \"forbid\", \"allow\" or \"replace\""};
    return setup;
}

}  // namespace lastcall
