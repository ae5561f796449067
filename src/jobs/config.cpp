// SPDX-License-Identifier: Apache-2.0
// [jobs.*] and top-level keys of the TOML config; plain crontab files.
#include "lastcall/jobs/config.hpp"
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

namespace {

bool valid_job_name(std::string_view name) {
    return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '_' || c == '-' || c == '.';
    });
}

constexpr const char* kOnInterruptedWords =
    "expected \"retry\", \"cleanup-retry\", \"hold\" or \"none\"";

Error at(const std::string& path, long line, std::string_view key, const std::string& message) {
    return Error{path + ":" + std::to_string(line) + ": " + std::string(key) + ": " + message};
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

Result<JobSpec> parse_job(const std::string& path, const std::string& name, const toml::table& t,
                          const cron::TimeZone* zone) {
    JobSpec job;
    job.name = name;
    long line = static_cast<long>(t.source().begin.line);
    job.origin = path + ":" + std::to_string(line);
    const std::string prefix = "jobs." + name + ".";
    const toml::node* schedule_node = nullptr;
    const toml::node* output_node = nullptr;
    const toml::node* overlap_node = nullptr;
    for (const auto& [k, v] : t) {
        std::string key(k.str());
        std::string full = prefix + key;
        if (key == "schedule") {
            auto s = v.value_exact<std::string>();
            if (!s) return at(path, v, full, "expected a cron expression string");
            auto sched = cron::parse(*s, zone);
            if (!sched) return at(path, v, full, sched.error().message);
            job.schedule = std::move(*sched);
            schedule_node = &v;
        } else if (key == "command") {
            auto argv = get_command(path, v, full);
            if (!argv) return argv.error();
            job.command = std::move(*argv);
        } else if (key == "timeout") {
            auto s = v.value_exact<std::string>();
            if (!s) return at(path, v, full, "expected a duration string such as \"30s\"");
            auto d = parse_duration(*s);
            if (!d) return at(path, v, full, d.error().message);
            if (d->count() <= 0) return at(path, v, full, "must be above 0");
            job.timeout = *d;
        } else if (key == "overlap" || key == "concurrency") {
            if (overlap_node)
                return at(path, v, full,
                          "give `overlap` or `concurrency`, not both (they are one setting)");
            auto s = v.value_exact<std::string>();
            bool k8s = key == "concurrency";
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
            overlap_node = &v;
        } else if (key == "on_interrupted") {
            auto s = v.value_exact<std::string>();
            auto policy = s ? parse_on_interrupted(*s) : std::nullopt;
            if (!policy) return at(path, v, full, kOnInterruptedWords);
            job.on_interrupted = *policy;
        } else if (key == "output") {
            auto s = v.value_exact<std::string>();
            if (!s || s->empty()) return at(path, v, full, "expected a file path");
            if (s->front() != '/') return at(path, v, full, "must be an absolute path");
            if (s->back() == '/') return at(path, v, full, "must name a file, not a directory");
            job.output = *s;
            output_node = &v;
        } else if (key == "verify") {
            auto argv = get_command(path, v, full);
            if (!argv) return argv.error();
            // A shell string sees the staged path as $1 ("verify" is its $0).
            if (argv->size() == 3 && (*argv)[0] == "/bin/sh") argv->push_back("verify");
            job.verify = std::move(*argv);
        } else if (key == "user") {
            auto s = v.value_exact<std::string>();
            if (!s) return at(path, v, full, "expected a user name or id, USER[:GROUP]");
            auto creds = lookup_credentials(*s);
            if (!creds) return at(path, v, full, creds.error().message);
            job.user = std::move(*creds);
        } else if (key == "group") {
            auto s = v.value_exact<std::string>();
            if (!s) return at(path, v, full, "expected a group name or id");
            auto gid = parse_group(*s, system_userdb());
            if (!gid) return at(path, v, full, gid.error().message);
            job.group = *gid;
        } else {
            return at(path, v, full, "unknown key");
        }
    }
    if (!schedule_node) return at(path, line, prefix + "schedule", "missing");
    if (job.command.empty()) return at(path, line, prefix + "command", "missing");
    if (!job.verify.empty() && job.output.empty())
        return at(path, line, prefix + "verify", "needs `output` (it checks the staged output)");
    // Each run stages its own file, but two runs at once would race to promote onto the one
    // final name: the artifact would be whichever finished last, not the latest fire time's.
    if (output_node && job.overlap == Overlap::Allow)
        return at(path, *overlap_node, prefix + "overlap",
                  "\"allow\" cannot be combined with `output`: concurrent runs would race to "
                  "promote onto the same final file");
    return job;
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
    const toml::table* table = jobs->as_table();
    if (!table) return at(path, *jobs, "jobs", "expected tables [jobs.NAME]");
    for (const auto& [k, v] : *table) {
        std::string name(k.str());
        const toml::table* t = v.as_table();
        if (!t) return at(path, v, "jobs." + name, "expected a table [jobs." + name + "]");
        if (!valid_job_name(name))
            return at(path, v, "jobs." + name, "a job name uses only letters, digits, _ . -");
        auto job = parse_job(path, name, *t, zone ? &*zone : nullptr);
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
    return config;
}

Result<JobsConfig> load_jobs_config(const std::string& path) {
    auto text = read_file(path);
    if (!text) return text.error();
    return parse_jobs_toml(*text, path);
}

// A crontab entry's name, stable across edits of the file: its `# name:` comment, else the
// command's program and a hash of schedule and command ("backup-3f09a1c2"). A line number
// would rename every entry below an inserted line and lose their history in the ledger.
std::string crontab_entry_name(const std::string& schedule, const std::string& command) {
    std::uint64_t h = 1469598103934665603ull;
    for (unsigned char c : schedule + "\n" + command) h = (h ^ c) * 1099511628211ull;
    std::string program = command.substr(0, command.find_first_of(" \t"));
    program = program.substr(program.rfind('/') + 1);
    std::string slug;
    for (char c : program)
        if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')
            slug += c;
    if (slug.empty() || slug.size() > 32) slug = slug.empty() ? "cron" : slug.substr(0, 32);
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
    return slug + "-" + std::string(hex, 8);
}

Result<std::vector<JobSpec>> parse_crontab(std::string_view text, const std::string& path,
                                           CrontabFormat format) {
    std::vector<JobSpec> jobs;
    std::vector<std::string> env;
    std::string cron_tz;    // a CRON_TZ= line applies to the entries after it
    std::string next_name;  // a "# name: NAME" comment names the entry right after it
    // cron and supercronic never run an interrupted line again at the next start: neither does
    // lastcall, unless a "# on_interrupted: POLICY" comment on the line before asks for it.
    OnInterrupted next_policy = OnInterrupted::None;
    long line_no = 0;
    std::size_t pos = 0;
    while (pos <= text.size()) {
        std::size_t nl = text.find('\n', pos);
        std::string_view raw =
            text.substr(pos, nl == std::string_view::npos ? text.npos : nl - pos);
        pos = nl == std::string_view::npos ? text.size() + 1 : nl + 1;
        ++line_no;
        std::string line(raw);
        while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
            line.pop_back();
        std::size_t first = line.find_first_not_of(" \t");
        if (first != std::string::npos && line[first] == '#') {
            std::string_view comment = std::string_view(line).substr(first + 1);
            comment.remove_prefix(std::min(comment.find_first_not_of(" \t"), comment.size()));
            if (comment.starts_with("name:")) {
                comment.remove_prefix(5);
                comment.remove_prefix(std::min(comment.find_first_not_of(" \t"), comment.size()));
                next_name = std::string(comment);
                if (!valid_job_name(next_name))
                    return at(path, line_no, "name",
                              "'" + next_name + "' is not a job name (letters, digits, _ - .)");
            } else if (comment.starts_with("on_interrupted:")) {
                comment.remove_prefix(15);
                comment.remove_prefix(std::min(comment.find_first_not_of(" \t"), comment.size()));
                auto policy = parse_on_interrupted(comment);
                if (!policy) return at(path, line_no, "on_interrupted", kOnInterruptedWords);
                next_policy = *policy;
            }
            continue;
        }
        if (first == std::string::npos) continue;
        line.erase(0, first);

        // Words and where each one ends, so the command keeps its own spacing.
        std::vector<std::pair<std::size_t, std::size_t>> words;
        for (std::size_t i = 0; i < line.size();) {
            std::size_t b = line.find_first_not_of(" \t", i);
            if (b == std::string::npos) break;
            std::size_t e = line.find_first_of(" \t", b);
            if (e == std::string::npos) e = line.size();
            words.emplace_back(b, e);
            i = e;
        }
        std::string first_word = line.substr(words[0].first, words[0].second - words[0].first);
        auto eq = first_word.find('=');
        if (eq != std::string::npos && line[0] != '@' && line[0] != '*' &&
            !std::isdigit(static_cast<unsigned char>(line[0]))) {
            // NAME=VALUE: an environment assignment for the entries that follow, as in cron.
            std::string name = line.substr(0, line.find('='));
            std::string value = line.substr(line.find('=') + 1);
            if (name == "CRON_TZ")
                cron_tz = value;
            else
                env.push_back(name + "=" + value);
            continue;
        }
        auto expr_of = [&](std::size_t n) { return line.substr(0, words[n - 1].second); };
        // How many words are the schedule is supercronic's decision (cron::crontab_schedule_words);
        // a line that reading does not parse is an error naming it, never another reading.
        std::vector<std::string_view> texts;
        for (const auto& [b, e] : words) texts.push_back(std::string_view(line).substr(b, e - b));
        const std::size_t used = cron::crontab_schedule_words(texts);
        const std::string in_line = " (in '" + line + "')";
        if (words.size() <= used)
            return at(path, line_no, "schedule", "expected a schedule and a command" + in_line);
        std::string expr = expr_of(used);
        if (!cron_tz.empty()) expr = "CRON_TZ=" + cron_tz + " " + expr;
        auto schedule = cron::parse(expr, nullptr, cron::Fields::Crontab);
        if (!schedule) return at(path, line_no, "schedule", schedule.error().message + in_line);
        JobSpec job;
        job.origin = path + ":" + std::to_string(line_no);
        job.on_interrupted = std::exchange(next_policy, OnInterrupted::None);
        // The system format (/etc/crontab, /etc/cron.d) has the user between schedule and
        // command; the entry runs as that user.
        std::size_t command_word = used;
        if (format == CrontabFormat::System) {
            if (words.size() <= used + 1)
                return at(path, line_no, "user",
                          "expected a user and a command after the schedule");
            std::string user = std::string(texts[used]);
            auto creds = lookup_credentials(user);
            if (!creds)
                return at(path, line_no, "user", "'" + user + "': " + creds.error().message);
            job.user = std::move(*creds);
            ++command_word;
        }
        std::string command = line.substr(words[command_word].first);
        job.name = !next_name.empty() ? std::exchange(next_name, {})
                                      : crontab_entry_name(expr_of(used), command);
        for (const auto& other : jobs)
            if (other.name == job.name)
                return at(path, line_no, "name",
                          job.name + " is already the name of " + other.origin +
                              " (the same schedule and command twice? name one with '# name:')");
        job.schedule = std::move(*schedule);
        job.command = {"/bin/sh", "-c", command};
        job.env = env;
        jobs.push_back(std::move(job));
    }
    return jobs;
}

CrontabFormat crontab_format_of(const std::string& path) {
    // Where cron itself reads the system format: /etc/crontab and the files of /etc/cron.d
    // (also a copy of them elsewhere: an image's etc/crontab, a mounted cron.d).
    auto [dir, name] = split_path(path);
    std::string parent = dir.substr(dir.rfind('/') + 1);
    if ((name == "crontab" && parent == "etc") || parent == "cron.d") return CrontabFormat::System;
    return CrontabFormat::User;
}

Result<std::vector<JobSpec>> load_crontab(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
        // A cron.d directory: every file whose name cron would run (letters, digits, _ and -:
        // no editor backups, no .dpkg-old), in name order, in the system format.
        std::vector<std::string> names;
        if (DIR* d = ::opendir(path.c_str())) {
            while (dirent* e = ::readdir(d)) {
                std::string n = e->d_name;
                if (!n.empty() && std::all_of(n.begin(), n.end(), [](char c) {
                        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
                    }))
                    names.push_back(n);
            }
            ::closedir(d);
        } else {
            return sys_error("opendir " + path, errno);
        }
        std::sort(names.begin(), names.end());
        std::vector<JobSpec> all;
        for (const auto& n : names) {
            std::string file = path + "/" + n;
            auto text = read_file(file);
            if (!text) return text.error();
            auto jobs = parse_crontab(*text, file, CrontabFormat::System);
            if (!jobs) return jobs.error();
            for (auto& j : *jobs) {
                for (const auto& other : all)
                    if (other.name == j.name)
                        return Error{j.origin + ": " + j.name + " is already the name of " +
                                     other.origin};
                all.push_back(std::move(j));
            }
        }
        return all;
    }
    auto text = read_file(path);
    if (!text) return text.error();
    return parse_crontab(*text, path, crontab_format_of(path));
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
