// SPDX-License-Identifier: Apache-2.0
// `[services.*]` from the TOML config into ServiceSpecs, the dependency order, and the pure parts
// of the service model (state table, backoff, restart decision).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/wait.h>

#include <toml++/toml.h>

#include <algorithm>
#include <initializer_list>
#include <map>
#include <set>
#include <sstream>
#include <utility>
#include "lastcall/core/port.hpp"
#include "lastcall/core/toml_parse.hpp"

#include "lastcall/core/signals.hpp"
#include "lastcall/services/services.hpp"

namespace lastcall {

std::string_view to_string(RestartPolicy p) {
    switch (p) {
        case RestartPolicy::No:
            return "no";
        case RestartPolicy::OnFailure:
            return "on-failure";
        case RestartPolicy::Always:
            return "always";
    }
    return "?";
}

bool should_restart(RestartPolicy policy, int wait_status) {
    switch (policy) {
        case RestartPolicy::No:
            return false;
        case RestartPolicy::Always:
            return true;
        case RestartPolicy::OnFailure:
            return !(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0);
    }
    return false;
}

namespace {

// base^n by squaring. Not std::pow: the only libm function lastcall called, and a dynamic
// lastcall that needs libm maps it (0.3 MiB resident, one more library to load) on every start.
double power(double base, unsigned long n) {
    double result = 1.0;
    while (n > 0) {
        if (n & 1) result *= base;
        base *= base;
        n >>= 1;
    }
    return result;
}

}  // namespace

Millis Backoff::next_delay(MonoTime started, MonoTime ended) {
    if (ended - started >= policy_.reset_after) consecutive_ = 0;
    ++consecutive_;
    // In double, then capped: factor^n overflows no integer type this way (it becomes inf).
    double ms = static_cast<double>(policy_.initial.count()) *
                power(policy_.factor, static_cast<unsigned long>(consecutive_ - 1));
    if (!(ms < static_cast<double>(policy_.max.count()))) return policy_.max;
    return Millis{static_cast<Millis::rep>(ms)};
}

std::string_view to_string(ServiceState s) {
    switch (s) {
        case ServiceState::Pending:
            return "pending";
        case ServiceState::Starting:
            return "starting";
        case ServiceState::Ready:
            return "ready";
        case ServiceState::Cleaning:
            return "cleaning";
        case ServiceState::Backoff:
            return "backoff";
        case ServiceState::Exited:
            return "exited";
        case ServiceState::Failed:
            return "failed";
        case ServiceState::Stopping:
            return "stopping";
        case ServiceState::Stopped:
            return "stopped";
    }
    return "?";
}

std::string_view to_string(ServiceEvent e) {
    switch (e) {
        case ServiceEvent::Spawned:
            return "spawned";
        case ServiceEvent::ReadyPassed:
            return "ready check passed";
        case ServiceEvent::LeftBehind:
            return "exited, left processes behind";
        case ServiceEvent::ExitedRestart:
            return "exited, will restart";
        case ServiceEvent::ExitedFinal:
            return "exited";
        case ServiceEvent::LimitReached:
            return "restart limit reached";
        case ServiceEvent::DependencyFailed:
            return "a dependency failed";
        case ServiceEvent::RestartRefused:
            return "start refused";
        case ServiceEvent::StopRequested:
            return "stop requested";
        case ServiceEvent::TreeGone:
            return "tree gone";
    }
    return "?";
}

std::optional<ServiceState> service_transition(ServiceState from, ServiceEvent event) {
    using S = ServiceState;
    using E = ServiceEvent;
    switch (from) {
        case S::Pending:
        case S::Backoff:
            if (event == E::Spawned) return S::Starting;
            if (event == E::DependencyFailed && from == S::Pending) return S::Failed;
            if (event == E::RestartRefused || event == E::StopRequested) return S::Stopped;
            return std::nullopt;
        case S::Starting:
            if (event == E::ReadyPassed) return S::Ready;
            [[fallthrough]];
        case S::Ready:
            if (event == E::LeftBehind) return S::Cleaning;
            [[fallthrough]];
        case S::Cleaning:
            if (event == E::ExitedRestart) return S::Backoff;
            if (event == E::ExitedFinal) return S::Exited;
            if (event == E::LimitReached) return S::Failed;
            if (event == E::StopRequested) return S::Stopping;
            return std::nullopt;
        case S::Exited:
        case S::Failed:
            // Its leader is gone but processes it left behind are not: they are stopped too.
            if (event == E::StopRequested) return S::Stopping;
            return std::nullopt;
        case S::Stopping:
            if (event == E::TreeGone) return S::Stopped;
            return std::nullopt;
        case S::Stopped:
            return std::nullopt;
    }
    return std::nullopt;
}

bool valid_service_name(std::string_view name) {
    if (name.empty()) return false;
    return std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '_' || c == '-' || c == '.';
    });
}

namespace {

// Builds "FILE:LINE: services.NAME.KEY: message" errors.
class Where {
  public:
    Where(const std::string& path, std::string prefix) : path_(path), prefix_(std::move(prefix)) {}
    Error at(const toml::node& node, std::string_view key, const std::string& message) const {
        return at_line(static_cast<int>(node.source().begin.line), key, message);
    }
    Error at_line(int line, std::string_view key, const std::string& message) const {
        std::string where = path_ + ":" + std::to_string(line) + ": " + prefix_;
        if (!key.empty()) where += "." + std::string(key);
        return Error{where + ": " + message};
    }
    std::string origin(const toml::node& node) const {
        return path_ + ":" + std::to_string(node.source().begin.line);
    }

  private:
    const std::string& path_;
    std::string prefix_;
};

Result<std::string> get_string(const Where& w, const toml::node& n, std::string_view key) {
    if (auto s = n.value<std::string>(); s && n.is_string()) return *s;
    return w.at(n, key, "expected a string");
}

Result<Millis> get_duration(const Where& w, const toml::node& n, std::string_view key) {
    auto s = get_string(w, n, key);
    if (!s) return s.error();
    auto d = parse_duration(*s);
    if (!d) return w.at(n, key, d.error().message);
    return *d;
}

Result<std::vector<std::string>> get_string_list(const Where& w, const toml::node& n,
                                                 std::string_view key, bool allow_empty) {
    const toml::array* arr = n.as_array();
    if (!arr) return w.at(n, key, "expected an array of strings");
    std::vector<std::string> out;
    for (const auto& item : *arr) {
        if (!item.is_string()) return w.at(item, key, "expected an array of strings");
        out.push_back(*item.value<std::string>());
    }
    if (out.empty() && !allow_empty) return w.at(n, key, "must not be empty");
    return out;
}

Result<std::vector<std::string>> get_command(const Where& w, const toml::node& n) {
    if (n.is_string()) {
        std::string cmd = *n.value<std::string>();
        if (cmd.empty()) return w.at(n, "command", "must not be empty");
        return std::vector<std::string>{"/bin/sh", "-c", cmd};
    }
    if (n.is_array()) {
        auto argv = get_string_list(w, n, "command", false);
        // exec("") fails with ENOENT at every start: a restart loop over a typo, said at load.
        if (argv && (*argv)[0].empty()) return w.at(n, "command", "the program name is empty");
        return argv;
    }
    return w.at(n, "command", "expected a string (run by /bin/sh -c) or an array of strings");
}

Status parse_backoff(const Where& w, const toml::node& n, BackoffPolicy& out) {
    const toml::table* t = n.as_table();
    if (!t) return w.at(n, "backoff", "expected a table {initial, max, factor, reset_after}");
    for (const auto& [k, v] : *t) {
        std::string key = "backoff." + std::string(k.str());
        if (k == "initial" || k == "max" || k == "reset_after") {
            auto d = get_duration(w, v, key);
            if (!d) return d.error();
            (k == "initial" ? out.initial : k == "max" ? out.max : out.reset_after) = *d;
        } else if (k == "factor") {
            auto f = v.value<double>();
            if (!f || !(v.is_floating_point() || v.is_integer()) || *f < 1.0 || *f > 100.0)
                return w.at(v, key, "expected a number between 1 and 100");
            out.factor = *f;
        } else {
            return w.at(v, key, "unknown key");
        }
    }
    if (out.initial.count() <= 0) return w.at(n, "backoff.initial", "must be above 0");
    // A long initial delay alone raises the default cap instead of contradicting it.
    if (!t->contains("max")) out.max = std::max(out.max, out.initial);
    if (out.max < out.initial) return w.at(n, "backoff.max", "must not be below backoff.initial");
    return Ok{};
}

Status parse_restart_limit(const Where& w, const toml::node& n, RestartLimit& out) {
    const toml::table* t = n.as_table();
    if (!t) return w.at(n, "restart_limit", "expected a table {burst, interval}");
    for (const auto& [k, v] : *t) {
        std::string key = "restart_limit." + std::string(k.str());
        if (k == "burst") {
            auto b = v.value<long long>();
            if (!b || !v.is_integer() || *b < 1 || *b > 1000000)
                return w.at(v, key, "expected a whole number of starts, 1 or more");
            out.burst = static_cast<int>(*b);
        } else if (k == "interval") {
            auto d = get_duration(w, v, key);
            if (!d) return d.error();
            if (d->count() <= 0) return w.at(v, key, "must be above 0");
            out.interval = *d;
        } else {
            return w.at(v, key, "unknown key");
        }
    }
    return Ok{};
}

// "127.0.0.1:8080", "[::1]:8080": numeric only, so no name lookup ever blocks the event loop.
Status parse_tcp(const Where& w, const toml::node& n, ReadyCheck& out) {
    auto s = get_string(w, n, "ready.tcp");
    if (!s) return s.error();
    std::string text = *s, host, port;
    if (!text.empty() && text[0] == '[') {
        auto close = text.find("]:");
        if (close == std::string::npos) return w.at(n, "ready.tcp", "expected [ADDRESS]:PORT");
        host = text.substr(1, close - 1);
        port = text.substr(close + 2);
    } else {
        auto colon = text.rfind(':');
        if (colon == std::string::npos) return w.at(n, "ready.tcp", "expected ADDRESS:PORT");
        host = text.substr(0, colon);
        port = text.substr(colon + 1);
    }
    auto p = parse_port(port);
    if (!p) return w.at(n, "ready.tcp", "invalid port '" + port + "'");
    if (host.empty()) return w.at(n, "ready.tcp", "missing address");
    // Checked here, not at the first probe: a name ('localhost') used to pass the load, and the
    // service then waited forever for a probe that could never run, its dependents with it.
    in6_addr any{};
    if (::inet_pton(AF_INET, host.c_str(), &any) != 1 &&
        ::inet_pton(AF_INET6, host.c_str(), &any) != 1)
        return w.at(
            n, "ready.tcp",
            "'" + host + "' is not a numeric IPv4 or IPv6 address (names are not looked up)");
    out.host = host;
    out.port = static_cast<std::uint16_t>(*p);
    return Ok{};
}

Status parse_ready(const Where& w, const toml::node& n, ReadyCheck& out) {
    const toml::table* t = n.as_table();
    if (!t) return w.at(n, "ready", "expected a table with one of file, tcp, exec");
    int kinds = 0;
    for (const auto& [k, v] : *t) {
        std::string key = "ready." + std::string(k.str());
        if (k == "file") {
            auto s = get_string(w, v, key);
            if (!s) return s.error();
            if (s->empty()) return w.at(v, key, "must not be empty");
            out.kind = ReadyCheck::Kind::File;
            out.file = *s;
            ++kinds;
        } else if (k == "tcp") {
            if (auto st = parse_tcp(w, v, out); !st) return st;
            out.kind = ReadyCheck::Kind::Tcp;
            ++kinds;
        } else if (k == "exec") {
            auto argv = get_string_list(w, v, key, false);
            if (!argv) return argv.error();
            out.kind = ReadyCheck::Kind::Exec;
            out.exec = *argv;
            ++kinds;
        } else if (k == "interval") {
            auto d = get_duration(w, v, key);
            if (!d) return d.error();
            if (d->count() <= 0) return w.at(v, key, "must be above 0");
            out.interval = *d;
        } else {
            return w.at(v, key, "unknown key (expected file, tcp, exec or interval)");
        }
    }
    if (kinds != 1) return w.at(n, "ready", "expected exactly one of file, tcp, exec");
    return Ok{};
}

Status parse_env(const Where& w, const toml::node& n, std::vector<std::string>& out) {
    const toml::table* env = n.as_table();
    if (!env) return w.at(n, "env", "expected a table of NAME = \"value\"");
    for (const auto& [ek, ev] : *env) {
        std::string ekey = "env." + std::string(ek.str());
        if (ek.str().empty() || ek.str().find('=') != std::string_view::npos)
            return w.at(ev, ekey, "invalid variable name");
        std::string value;
        if (ev.is_string())
            value = *ev.value<std::string>();
        else if (ev.is_integer())
            value = std::to_string(*ev.value<long long>());
        else if (ev.is_boolean())
            value = *ev.value<bool>() ? "true" : "false";
        else
            return w.at(ev, ekey, "expected a string, integer or boolean");
        out.push_back(std::string(ek.str()) + "=" + value);
    }
    return Ok{};
}

Status parse_user(const Where& w, const toml::node& n, std::optional<Credentials>& out) {
    auto u = get_string(w, n, "user");
    if (!u) return u.error();
    auto creds = lookup_credentials(*u);
    if (!creds) return w.at(n, "user", creds.error().message);
    out = *creds;
    return Ok{};
}

Status parse_group_key(const Where& w, const toml::node& n, std::optional<gid_t>& out) {
    auto g = get_string(w, n, "group");
    if (!g) return g.error();
    auto gid = parse_group(*g, system_userdb());
    if (!gid) return w.at(n, "group", gid.error().message);
    out = *gid;
    return Ok{};
}

// A key whose value is one of a few words: `expected "a", "b" or "c", not "x"` otherwise.
template <typename T>
Status get_word(const Where& w, const toml::node& n, std::string_view key,
                std::initializer_list<std::pair<std::string_view, T>> words, T& out) {
    auto text = get_string(w, n, key);
    if (!text) return text.error();
    std::string expected;
    std::size_t i = 0;
    for (const auto& [word, value] : words) {
        if (*text == word) {
            out = value;
            return Ok{};
        }
        if (i > 0) expected += i + 1 == words.size() ? " or " : ", ";
        expected += "\"" + std::string(word) + "\"";
        ++i;
    }
    return w.at(n, key, "expected " + expected + ", not \"" + *text + "\"");
}

Status parse_stop_signal(const Where& w, const toml::node& n, int& out) {
    std::string text;
    if (n.is_integer())
        text = std::to_string(*n.value<long long>());
    else if (n.is_string())
        text = *n.value<std::string>();
    else
        return w.at(n, "stop_signal", "expected a signal name or number");
    auto sig = parse_signal(text);
    if (!sig) return w.at(n, "stop_signal", sig.error().message);
    out = *sig;
    return Ok{};
}

// The keys whose value is a plain string, list, duration or boolean.
Status parse_simple_key(const Where& w, std::string_view key, const toml::node& v, ServiceSpec& s) {
    if (key == "workdir") {
        auto d = get_string(w, v, key);
        if (!d) return d.error();
        s.workdir = *d;
    } else if (key == "depends_on") {
        auto deps = get_string_list(w, v, key, true);
        if (!deps) return deps.error();
        s.depends_on = *deps;
        s.depends_on_origin = w.origin(v);
    } else if (key == "grace") {
        auto d = get_duration(w, v, key);
        if (!d) return d.error();
        s.grace = *d;
    } else if (key == "main") {
        if (!v.is_boolean()) return w.at(v, key, "expected true or false");
        s.main = *v.value<bool>();
    } else {
        return w.at(v, key, "unknown key");
    }
    return Ok{};
}

// One key of [services.NAME] into the spec.
Status parse_service_key(const Where& w, std::string_view key, const toml::node& v,
                         ServiceSpec& s) {
    if (key == "command") {
        auto argv = get_command(w, v);
        if (!argv) return argv.error();
        s.argv = *argv;
        return Ok{};
    }
    if (key == "env") return parse_env(w, v, s.env);
    if (key == "user") return parse_user(w, v, s.user);
    if (key == "group") return parse_group_key(w, v, s.group);
    if (key == "restart")
        return get_word<RestartPolicy>(w, v, key,
                                       {{"no", RestartPolicy::No},
                                        {"on-failure", RestartPolicy::OnFailure},
                                        {"always", RestartPolicy::Always}},
                                       s.restart);
    if (key == "backoff") return parse_backoff(w, v, s.backoff);
    if (key == "restart_limit") return parse_restart_limit(w, v, s.restart_limit);
    if (key == "ready") return parse_ready(w, v, s.ready);
    if (key == "stop_signal") return parse_stop_signal(w, v, s.stop_signal);
    // As --kill-scope words it; "child" is the leader alone.
    if (key == "kill_scope")
        return get_word<StopReach>(
            w, v, key,
            {{"tree", StopReach::Tree}, {"group", StopReach::Group}, {"child", StopReach::Leader}},
            s.kill_scope);
    return parse_simple_key(w, key, v, s);
}

Result<ServiceSpec> parse_service(const std::string& path, const std::string& name,
                                  const toml::table& t) {
    Where w(path, "services." + name);
    ServiceSpec s;
    s.name = name;
    s.origin = w.origin(t);
    if (!valid_service_name(name))
        return w.at_line(static_cast<int>(t.source().begin.line), "",
                         "invalid service name (use letters, digits, '_', '-', '.')");
    for (const auto& [k, v] : t)
        if (auto st = parse_service_key(w, k.str(), v, s); !st) return st.error();
    if (!t.contains("command"))
        return w.at_line(static_cast<int>(t.source().begin.line), "command", "missing");
    // A relative ready.file is the service's: resolved against its workdir, as its ready.exec
    // and its own `touch ready.flag` are. Read against lastcall's directory, the service was
    // never seen ready, and the stale-flag removal at each start deleted lastcall's file.
    if (s.ready.kind == ReadyCheck::Kind::File && !s.ready.file.empty() && s.ready.file[0] != '/' &&
        !s.workdir.empty())
        s.ready.file = s.workdir + "/" + s.ready.file;
    return s;
}

}  // namespace

Result<std::vector<ServiceSpec>> parse_services_toml(std::string_view text,
                                                     const std::string& path) {
    auto parsed = parse_toml_document(text, path);
    if (!parsed) return parsed.error();
    toml::table root = std::move(*parsed);
    std::vector<ServiceSpec> out;
    const toml::node* services = root.get("services");
    if (!services) return out;  // only other tables ([jobs.*]): nothing for this loader
    const toml::table* table = services->as_table();
    if (!table)
        return Error{path + ":" + std::to_string(services->source().begin.line) +
                     ": services: expected tables [services.NAME]"};
    std::string main_origin;
    for (const auto& [k, v] : *table) {
        std::string name(k.str());
        const toml::table* t = v.as_table();
        if (!t)
            return Error{path + ":" + std::to_string(v.source().begin.line) + ": services." + name +
                         ": expected a table [services." + name + "]"};
        auto spec = parse_service(path, name, *t);
        if (!spec) return spec.error();
        if (spec->main) {
            if (!main_origin.empty())
                return Error{spec->origin + ": services." + name +
                             ".main: only one service can be main (another is at " + main_origin +
                             ")"};
            main_origin = spec->origin;
        }
        out.push_back(std::move(*spec));
    }
    // toml++ keeps tables sorted by key; the file's order is the natural tie-break for starting.
    std::stable_sort(out.begin(), out.end(), [](const ServiceSpec& a, const ServiceSpec& b) {
        auto line = [](const std::string& origin) {
            return std::stoi(origin.substr(origin.rfind(':') + 1));
        };
        return line(a.origin) < line(b.origin);
    });
    if (auto st = order_by_dependencies(out); !st) return st.error();
    return out;
}

Status order_by_dependencies(std::vector<ServiceSpec>& services) {
    std::map<std::string, std::size_t> index;
    for (std::size_t i = 0; i < services.size(); ++i) index[services[i].name] = i;
    for (const auto& s : services) {
        // The line of the depends_on key, not of the table's header (a Procfile has neither).
        std::string where =
            (s.depends_on_origin.empty() ? s.origin : s.depends_on_origin) + ": services." + s.name;
        for (const auto& d : s.depends_on) {
            if (!index.count(d)) return Error{where + ".depends_on: unknown service '" + d + "'"};
            if (d == s.name) return Error{where + ".depends_on: depends on itself"};
        }
    }
    // Depth-first, in the given order, so independent services keep their file order. With an
    // explicit stack: a depends_on chain as long as the file is long must not exhaust lastcall's
    // own stack. A service met again while still on the path closes a cycle; the error points
    // at the depends_on of the edge that closes it.
    enum class Mark { None, OnPath, Done };
    std::vector<Mark> mark(services.size(), Mark::None);
    std::vector<std::size_t> order;
    order.reserve(services.size());
    struct Frame {
        std::size_t service;
        std::size_t next_dep = 0;
    };
    std::vector<Frame> path;
    for (std::size_t root = 0; root < services.size(); ++root) {
        if (mark[root] != Mark::None) continue;
        mark[root] = Mark::OnPath;
        path.push_back({root});
        while (!path.empty()) {
            Frame& top = path.back();
            const ServiceSpec& s = services[top.service];
            if (top.next_dep == s.depends_on.size()) {
                mark[top.service] = Mark::Done;
                order.push_back(top.service);
                path.pop_back();
                continue;
            }
            std::size_t d = index[s.depends_on[top.next_dep++]];
            if (mark[d] == Mark::Done) continue;
            if (mark[d] == Mark::None) {
                mark[d] = Mark::OnPath;
                path.push_back({d});  // `top` is not used after this
                continue;
            }
            // On the path: d -> ... -> s -> d.
            std::size_t from = 0;
            while (path[from].service != d) ++from;
            std::vector<std::string> names;
            for (std::size_t i = from; i < path.size(); ++i)
                names.push_back(services[path[i].service].name);
            names.push_back(services[d].name);
            constexpr std::size_t kShown = 8;
            std::string chain;
            for (std::size_t i = 0; i < names.size(); ++i) {
                if (names.size() > 2 * kShown && i == kShown) {
                    chain += "... (" + std::to_string(names.size() - 2 * kShown) + " more) -> ";
                    i = names.size() - kShown - 1;
                    continue;
                }
                chain += names[i] + (i + 1 < names.size() ? " -> " : "");
            }
            return Error{(s.depends_on_origin.empty() ? s.origin : s.depends_on_origin) +
                         ": services." + s.name + ".depends_on: dependency cycle " + chain};
        }
    }
    std::vector<ServiceSpec> sorted;
    for (std::size_t i : order) sorted.push_back(std::move(services[i]));
    services = std::move(sorted);
    return Ok{};
}

}  // namespace lastcall
