// SPDX-License-Identifier: Apache-2.0
// Crontab files as jobs: the user format, the system format (/etc/crontab, /etc/cron.d) and a
// cron.d directory; each entry's stable name.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "config_internal.hpp"
#include "lastcall/core/read_file.hpp"
#include "lastcall/core/safe_path.hpp"
#include "lastcall/jobs/config.hpp"
#include "lastcall/process/credentials.hpp"

namespace lastcall {

namespace {

Error at(const std::string& path, long line, std::string_view key, const std::string& message) {
    return config_error_at(path, line, key, message);
}

}  // namespace

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

namespace {

// What earlier lines of a crontab say about the entries after them.
struct CrontabContext {
    std::vector<std::string> env;
    std::string cron_tz;  // a CRON_TZ= line applies to the entries after it
    // A SHELL= line is the shell of the entries after it, as cron's is: a crontab written for
    // bash (`SHELL=/bin/bash` above `[[ ... ]]` or `source`) must not run under dash instead.
    std::string shell = "/bin/sh";
    std::string next_name;  // a "# name: NAME" comment names the entry right after it
    // cron and supercronic never run an interrupted line again at the next start: neither does
    // lastcall, unless a "# on_interrupted: POLICY" comment on the line before asks for it.
    OnInterrupted next_policy = OnInterrupted::None;
};

// One crontab line, trailing blanks and a CR removed.
struct CrontabLine {
    long number = 0;
    std::string text;
    // Words and where each one ends, so the command keeps its own spacing.
    std::vector<std::pair<std::size_t, std::size_t>> words;
    std::vector<std::string_view> texts;
    std::string word(std::size_t n) const {
        return text.substr(words[n].first, words[n].second - words[n].first);
    }
    // The text up to the end of the n-th word (the schedule of n words).
    std::string up_to(std::size_t n) const { return text.substr(0, words[n - 1].second); }
};

std::string_view skip_blanks(std::string_view s) {
    s.remove_prefix(std::min(s.find_first_not_of(" \t"), s.size()));
    return s;
}

// A comment line: a "# name:" or "# on_interrupted:" comment is about the next entry.
Status read_crontab_comment(std::string_view comment, const std::string& path, long line_no,
                            CrontabContext& ctx) {
    comment = skip_blanks(comment);
    if (comment.starts_with("name:")) {
        ctx.next_name = std::string(skip_blanks(comment.substr(5)));
        if (!valid_job_name(ctx.next_name))
            return at(path, line_no, "name",
                      "'" + ctx.next_name + "' is not a job name (letters, digits, _ - .)");
    } else if (comment.starts_with("on_interrupted:")) {
        auto policy = parse_on_interrupted(skip_blanks(comment.substr(15)));
        if (!policy) return at(path, line_no, "on_interrupted", kOnInterruptedWords);
        ctx.next_policy = *policy;
    }
    return Ok{};
}

void split_words(CrontabLine& line) {
    const std::string& text = line.text;
    for (std::size_t i = 0; i < text.size();) {
        std::size_t b = text.find_first_not_of(" \t", i);
        if (b == std::string::npos) break;
        std::size_t e = text.find_first_of(" \t", b);
        if (e == std::string::npos) e = text.size();
        line.words.emplace_back(b, e);
        i = e;
    }
    for (const auto& [b, e] : line.words)
        line.texts.push_back(std::string_view(text).substr(b, e - b));
}

// NAME=VALUE, as cron (cronie's load_env) and supercronic read it: blanks around the '=', a
// value in matching quotes unquoted (`CRON_TZ = "Europe/Paris"` read as a name with a blank and
// a quoted zone had been an entry's error, or a zone named with its quotes). An environment
// assignment for the entries that follow, CRON_TZ included, as both give it; CRON_TZ also sets
// their zone, checked here so that a bad zone is this line's error and not each entry's. TZ is
// only the commands' (the fire times are CRON_TZ's, as in cronie). SHELL is also the entries'
// shell. false: the line is an entry.
Result<bool> take_assignment(const CrontabLine& line, const std::string& path,
                             CrontabContext& ctx) {
    const std::string& text = line.text;
    if (text[0] == '@' || text[0] == '*' || std::isdigit(static_cast<unsigned char>(text[0])))
        return false;
    std::size_t name_end = text.find_first_of(" \t=");
    std::size_t eq = text.find_first_not_of(" \t", name_end);
    if (name_end == 0 || eq == std::string::npos || text[eq] != '=') return false;
    std::string name = text.substr(0, name_end);
    std::string value = text.substr(std::min(text.find_first_not_of(" \t", eq + 1), text.size()));
    if (value.size() > 1 && (value[0] == '"' || value[0] == '\'') && value.back() == value[0])
        value = value.substr(1, value.size() - 2);
    if (name == "CRON_TZ") {
        // Empty: the local zone again, as cronie reads an empty CRON_TZ.
        auto zone = cron::TimeZone::load(value.empty() ? "UTC" : value);
        if (!zone)
            return at(path, line.number, "CRON_TZ",
                      zone.error().message + " (in '" + line.text + "')");
        ctx.cron_tz = value;
    }
    // Empty: the default shell again, as `CRON_TZ=` alone is the local zone again.
    if (name == "SHELL") ctx.shell = value.empty() ? "/bin/sh" : value;
    // A later line for the same name replaces the value, as in cron's environment.
    std::erase_if(ctx.env, [&](const std::string& e) { return e.starts_with(name + "="); });
    ctx.env.push_back(name + "=" + value);
    return true;
}

// The system format (/etc/crontab, /etc/cron.d) has the user between schedule and command; the
// entry runs as that user. Returns the index of the command's first word.
Result<std::size_t> take_crontab_user(const CrontabLine& line, std::size_t used,
                                      const std::string& path, JobSpec& job) {
    if (line.words.size() <= used + 1)
        return at(path, line.number, "user", "expected a user and a command after the schedule");
    std::string user = std::string(line.texts[used]);
    auto creds = lookup_credentials(user);
    if (!creds) return at(path, line.number, "user", "'" + user + "': " + creds.error().message);
    job.user = std::move(*creds);
    return used + 1;
}

// An entry's line into a job: its schedule, its user (system format), its command and name.
Result<JobSpec> crontab_entry(const CrontabLine& line, const std::string& path,
                              CrontabFormat format, CrontabContext& ctx,
                              const std::vector<JobSpec>& jobs) {
    // How many words are the schedule is supercronic's decision (cron::crontab_schedule_words);
    // a line that reading does not parse is an error naming it, never another reading.
    const std::size_t used = cron::crontab_schedule_words(line.texts);
    const std::string in_line = " (in '" + line.text + "')";
    if (line.words.size() <= used)
        return at(path, line.number, "schedule", "expected a schedule and a command" + in_line);
    std::string expr = line.up_to(used);
    if (!ctx.cron_tz.empty()) expr = "CRON_TZ=" + ctx.cron_tz + " " + expr;
    auto schedule = cron::parse(expr, nullptr, cron::Fields::Crontab);
    if (!schedule) return at(path, line.number, "schedule", schedule.error().message + in_line);
    JobSpec job;
    job.origin = path + ":" + std::to_string(line.number);
    job.on_interrupted = std::exchange(ctx.next_policy, OnInterrupted::None);
    std::size_t command_word = used;
    if (format == CrontabFormat::System) {
        auto at_command = take_crontab_user(line, used, path, job);
        if (!at_command) return at_command.error();
        command_word = *at_command;
    }
    std::string command = line.text.substr(line.words[command_word].first);
    job.name = !ctx.next_name.empty() ? std::exchange(ctx.next_name, {})
                                      : crontab_entry_name(line.up_to(used), command);
    for (const auto& other : jobs)
        if (other.name == job.name)
            return at(path, line.number, "name",
                      job.name + " is already the name of " + other.origin +
                          " (the same schedule and command twice? name one with '# name:')");
    job.schedule = std::move(*schedule);
    job.command = {ctx.shell, "-c", command};
    job.env = ctx.env;
    return job;
}

}  // namespace

Result<std::vector<JobSpec>> parse_crontab(std::string_view text, const std::string& path,
                                           CrontabFormat format) {
    std::vector<JobSpec> jobs;
    CrontabContext ctx;
    long line_no = 0;
    std::size_t pos = 0;
    while (pos <= text.size()) {
        std::size_t nl = text.find('\n', pos);
        std::string_view raw =
            text.substr(pos, nl == std::string_view::npos ? text.npos : nl - pos);
        pos = nl == std::string_view::npos ? text.size() + 1 : nl + 1;
        CrontabLine line{++line_no, std::string(raw), {}, {}};
        std::string& t = line.text;
        while (!t.empty() && (t.back() == '\r' || t.back() == ' ' || t.back() == '\t'))
            t.pop_back();
        std::size_t first = t.find_first_not_of(" \t");
        if (first == std::string::npos) continue;
        if (t[first] == '#') {
            if (auto st =
                    read_crontab_comment(std::string_view(t).substr(first + 1), path, line_no, ctx);
                !st)
                return st.error();
            continue;
        }
        t.erase(0, first);
        split_words(line);
        auto assignment = take_assignment(line, path, ctx);
        if (!assignment) return assignment.error();
        if (*assignment) continue;
        auto job = crontab_entry(line, path, format, ctx, jobs);
        if (!job) return job.error();
        jobs.push_back(std::move(*job));
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

}  // namespace lastcall
