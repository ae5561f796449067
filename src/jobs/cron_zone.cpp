// SPDX-License-Identifier: Apache-2.0
// Time zones: POSIX TZ rules and TZif files (RFC 8536), and the offsets and transitions
// they give.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <utility>
#include <vector>

#include "cron_internal.hpp"
#include "lastcall/core/read_file.hpp"
#include "lastcall/jobs/cron.hpp"

namespace lastcall::cron {

namespace {

std::int64_t rule_date_days(std::int64_t year, const PosixRule::When& w) {
    switch (w.kind) {
        case PosixRule::When::kJulian1:  // 1..365, February 29 is never counted
            return days_from_civil(year, 1, 1) + w.day - 1 + (is_leap(year) && w.day >= 60);
        case PosixRule::When::kJulian0:  // 0..365, February 29 is counted
            return days_from_civil(year, 1, 1) + w.day;
        case PosixRule::When::kMonthWeekDay: {
            const auto month = static_cast<unsigned>(w.month);
            const std::int64_t first = days_from_civil(year, month, 1);
            const int lead = (w.wday - static_cast<int>(weekday_from_days(first)) + 7) % 7;
            std::int64_t d = first + lead + 7 * (w.week - 1);
            const std::int64_t last = first + days_in_month(year, month) - 1;
            while (d > last) d -= 7;  // week 5 means "the last one"
            return d;
        }
    }
    return 0;
}

// The rule's two transitions in `year`, as (instant, new offset), sorted.
std::array<std::pair<std::int64_t, std::int32_t>, 2> rule_transitions(const PosixRule& r,
                                                                      std::int64_t year) {
    // The start time is in standard time (in force just before), the end time in DST.
    const std::int64_t start = rule_date_days(year, r.start) * kDay + r.start.time - r.std_off;
    const std::int64_t end = rule_date_days(year, r.end) * kDay + r.end.time - r.dst_off;
    std::array<std::pair<std::int64_t, std::int32_t>, 2> out{
        {{start, r.dst_off}, {end, r.std_off}}};
    if (out[1].first < out[0].first) std::swap(out[0], out[1]);
    return out;
}

std::int64_t year_of_instant(std::int64_t t) {
    return civil_from_days(floor_div(t, kDay)).year;
}

std::int32_t rule_offset_at(const PosixRule& r, std::int64_t t) {
    if (!r.has_dst) return r.std_off;
    const std::int64_t y = year_of_instant(t);
    std::int32_t off = r.std_off;
    std::int64_t latest = INT64_MIN;
    for (std::int64_t yy = y - 1; yy <= y + 1; ++yy)
        for (const auto& [at, o] : rule_transitions(r, yy))
            if (at <= t && at >= latest) latest = at, off = o;
    return off;
}

}  // namespace

// The offset in force at `from` and every change in (from, to], table and rule combined.
std::int32_t changes(const ZoneData& z, std::int64_t from, std::int64_t to,
                     std::vector<Transition>& out) {
    out.clear();
    const auto& at = z.trans_at;
    const bool rule_has_range = z.rule.has_value();
    const std::int64_t rule_from = at.empty() ? INT64_MIN : at.back();

    std::int32_t off;
    if (rule_has_range && from >= rule_from) {
        off = rule_offset_at(*z.rule, from);
    } else {
        const auto it = std::upper_bound(at.begin(), at.end(), from);
        off = it == at.begin() ? z.initial_off
                               : z.trans_off[static_cast<std::size_t>(it - at.begin() - 1)];
    }
    const std::int32_t off_at_from = off;

    for (auto it = std::upper_bound(at.begin(), at.end(), from); it != at.end() && *it <= to;
         ++it) {
        const std::int32_t next = z.trans_off[static_cast<std::size_t>(it - at.begin())];
        if (next != off) out.push_back({*it, off, next});
        off = next;
    }
    if (rule_has_range && z.rule->has_dst && to > rule_from) {
        const std::int64_t lo = std::max(from, rule_from);
        std::vector<std::pair<std::int64_t, std::int32_t>> rt;
        for (std::int64_t y = year_of_instant(lo) - 1; y <= year_of_instant(to) + 1; ++y)
            for (const auto& tr : rule_transitions(*z.rule, y))
                if (tr.first > lo && tr.first <= to) rt.push_back(tr);
        std::sort(rt.begin(), rt.end());
        for (const auto& [when, next] : rt) {
            if (next != off) out.push_back({when, off, next});
            off = next;
        }
    }
    return off_at_from;
}

namespace {

// ---- POSIX TZ strings ----

struct PosixParser {
    std::string_view s;
    std::size_t i = 0;

    bool at_end() const { return i >= s.size(); }
    char peek() const { return at_end() ? '\0' : s[i]; }

    bool abbrev() {
        if (peek() == '<') {
            const std::size_t close = s.find('>', i);
            if (close == std::string_view::npos || close - i - 1 < 3) return false;
            i = close + 1;
            return true;
        }
        const std::size_t start = i;
        while (is_alpha(peek())) ++i;
        return i - start >= 3;
    }

    // [+-]hh[:mm[:ss]], hours up to max_hours; returns seconds with the written sign.
    std::optional<std::int32_t> hms(int max_hours) {
        int sign = 1;
        if (peek() == '+' || peek() == '-') sign = s[i++] == '-' ? -1 : 1;
        std::int32_t parts[3] = {0, 0, 0};
        for (int p = 0; p < 3; ++p) {
            if (p > 0) {
                if (peek() != ':') break;
                ++i;
            }
            const std::size_t start = i;
            while (is_digit(peek()) && i - start < 3) ++i;
            auto v = parse_uint(s.substr(start, i - start));
            if (!v || (p == 0 && *v > max_hours) || (p > 0 && *v > 59)) return std::nullopt;
            parts[p] = *v;
        }
        return sign * (parts[0] * 3600 + parts[1] * 60 + parts[2]);
    }

    std::optional<int> number() {
        const std::size_t start = i;
        while (is_digit(peek()) && i - start < 4) ++i;
        return parse_uint(s.substr(start, i - start));
    }

    std::optional<PosixRule::When> when() {
        PosixRule::When w;
        if (peek() == 'M') {
            ++i;
            auto m = number();
            if (!m || peek() != '.') return std::nullopt;
            ++i;
            auto wk = number();
            if (!wk || peek() != '.') return std::nullopt;
            ++i;
            auto d = number();
            if (!d || *m < 1 || *m > 12 || *wk < 1 || *wk > 5 || *d > 6) return std::nullopt;
            w.kind = PosixRule::When::kMonthWeekDay, w.month = *m, w.week = *wk, w.wday = *d;
        } else if (peek() == 'J') {
            ++i;
            auto n = number();
            if (!n || *n < 1 || *n > 365) return std::nullopt;
            w.kind = PosixRule::When::kJulian1, w.day = *n;
        } else {
            auto n = number();
            if (!n || *n > 365) return std::nullopt;
            w.kind = PosixRule::When::kJulian0, w.day = *n;
        }
        if (peek() == '/') {
            ++i;
            auto t = hms(167);  // RFC 8536 extension: -167..167 hours
            if (!t) return std::nullopt;
            w.time = *t;
        }
        return w;
    }

    std::optional<PosixRule> parse() {
        PosixRule r;
        if (!abbrev()) return std::nullopt;
        auto std_west = hms(24);
        if (!std_west) return std::nullopt;
        r.std_off = -*std_west;
        if (at_end()) return r;
        if (!abbrev()) return std::nullopt;
        r.has_dst = true;
        r.dst_off = r.std_off + 3600;
        if (peek() != ',' && !at_end()) {
            auto dst_west = hms(24);
            if (!dst_west) return std::nullopt;
            r.dst_off = -*dst_west;
        }
        if (at_end()) {  // no rule given: the US rules, as glibc's fallback
            r.start.month = 3, r.start.week = 2, r.end.month = 11, r.end.week = 1;
            return r;
        }
        if (peek() != ',') return std::nullopt;
        ++i;
        auto start = when();
        if (!start || peek() != ',') return std::nullopt;
        ++i;
        auto end = when();
        if (!end || !at_end()) return std::nullopt;
        r.start = *start, r.end = *end;
        return r;
    }
};

// ---- TZif ----

struct Reader {
    std::string_view b;
    std::size_t pos = 0;
    bool ok = true;

    bool need(std::size_t n) {
        if (!ok || b.size() - pos < n) ok = false;
        return ok;
    }
    std::int64_t be(std::size_t n) {
        if (!need(n)) return 0;
        std::uint64_t v = 0;
        for (std::size_t k = 0; k < n; ++k) v = (v << 8) | static_cast<unsigned char>(b[pos + k]);
        pos += n;
        if (n == 4) return static_cast<std::int32_t>(static_cast<std::uint32_t>(v));
        return static_cast<std::int64_t>(v);
    }
    void skip(std::size_t n) {
        if (need(n)) pos += n;
    }
};

bool valid_zone_name(std::string_view name) {
    if (name.empty() || name.size() > 255 || name.front() == '/' || name.back() == '/')
        return false;
    std::size_t start = 0;
    while (start <= name.size()) {
        std::size_t slash = name.find('/', start);
        if (slash == std::string_view::npos) slash = name.size();
        const std::string_view part = name.substr(start, slash - start);
        if (part.empty() || part == "." || part == "..") return false;
        for (char c : part)
            if (!(is_alpha(c) || is_digit(c) || c == '_' || c == '-' || c == '+' || c == '.'))
                return false;
        start = slash + 1;
    }
    return true;
}

// No zone file comes near 1 MiB; a path that names /dev/zero must not be slurped.
constexpr std::size_t kZoneFileLimit = std::size_t{1} << 20;

std::string zoneinfo_dir() {
    const char* dir = std::getenv("TZDIR");
    return dir && *dir ? dir : "/usr/share/zoneinfo";
}

}  // namespace

TimeZone TimeZone::utc() {
    static const auto data = [] {
        auto z = std::make_shared<ZoneData>();
        z->name = "UTC";
        return z;
    }();
    return TimeZone(data);
}

const std::string& TimeZone::name() const {
    return data_->name;
}

std::chrono::seconds TimeZone::offset_at(sys_seconds t) const {
    std::vector<Transition> none;
    const std::int64_t s = t.time_since_epoch().count();
    return std::chrono::seconds{changes(*data_, s, s, none)};
}

sys_seconds TimeZone::resolve(local_seconds wall) const {
    const std::int64_t w = wall.time_since_epoch().count();
    std::vector<Transition> tr;
    const std::int64_t lo = w - kWindow, hi = w + kWindow;
    std::int32_t off = changes(*data_, lo, hi, tr);
    // Each stretch of constant offset [from, to) shows wall times [from+off, to+off); the
    // earliest stretch showing w gives the first occurrence.
    std::int64_t from = lo;
    for (std::size_t k = 0; k <= tr.size(); ++k) {
        const std::int64_t to = k < tr.size() ? tr[k].at : hi + 1;
        const std::int64_t u = w - off;
        if (u >= from && u < to) return sys_seconds{std::chrono::seconds{u}};
        if (k < tr.size()) from = tr[k].at, off = tr[k].after;
    }
    // Not shown at all: w lies in a forward gap [at+before, at+after); the jump instant is the
    // first instant after the gap.
    for (const auto& t : tr)
        if (t.before < t.after && w >= t.at + t.before && w < t.at + t.after)
            return sys_seconds{std::chrono::seconds{t.at}};
    return sys_seconds{std::chrono::seconds{w - off}};  // unreachable for consistent data
}

Result<TimeZone> TimeZone::from_posix(std::string_view spec) {
    PosixParser p{spec};
    auto rule = p.parse();
    if (!rule || std::abs(rule->std_off) > kMaxOffset || std::abs(rule->dst_off) > kMaxOffset)
        return fail("invalid POSIX TZ string '" + std::string(spec) + "'");
    auto z = std::make_shared<ZoneData>();
    z->name = std::string(spec);
    z->initial_off = rule->std_off;
    z->rule = *rule;
    return TimeZone(std::move(z));
}

Result<TimeZone> TimeZone::from_tzif(std::string_view name, std::string_view bytes) {
    const std::string what = "time zone '" + std::string(name) + "': ";
    Reader r{bytes};
    auto header = [&](int& version, std::int64_t counts[6]) {
        if (!r.need(44) || bytes.substr(r.pos, 4) != "TZif") return false;
        const char v = bytes[r.pos + 4];
        version = v == '\0' ? 1 : v - '0';
        r.skip(20);
        for (int k = 0; k < 6; ++k) counts[k] = r.be(4);
        return r.ok;
    };
    int version = 0;
    std::int64_t c[6];  // isutcnt, isstdcnt, leapcnt, timecnt, typecnt, charcnt
    if (!header(version, c)) return fail(what + "not a TZif file");
    if (version < 1 || version > 9) return fail(what + "unknown TZif version");
    for (auto n : c)
        if (n < 0 || n > 100000) return fail(what + "corrupt TZif header");
    std::size_t time_size = 4;
    if (version >= 2) {  // skip the 32-bit block; the 64-bit one follows with its own header
        r.skip(static_cast<std::size_t>(c[3] * 5 + c[4] * 6 + c[5] + c[2] * 8 + c[1] + c[0]));
        if (!header(version, c)) return fail(what + "truncated TZif file");
        for (auto n : c)
            if (n < 0 || n > 100000) return fail(what + "corrupt TZif header");
        time_size = 8;
    }
    const auto [isutcnt, isstdcnt, leapcnt, timecnt, typecnt, charcnt] =
        std::array<std::size_t, 6>{static_cast<std::size_t>(c[0]), static_cast<std::size_t>(c[1]),
                                   static_cast<std::size_t>(c[2]), static_cast<std::size_t>(c[3]),
                                   static_cast<std::size_t>(c[4]), static_cast<std::size_t>(c[5])};
    if (leapcnt != 0) return fail(what + "zones with leap seconds are not supported");
    if (typecnt == 0) return fail(what + "TZif file has no local time types");
    if (!r.need(timecnt * (time_size + 1) + typecnt * 6 + charcnt + isstdcnt + isutcnt))
        return fail(what + "truncated TZif file");

    auto z = std::make_shared<ZoneData>();
    z->name = std::string(name);
    std::vector<std::int64_t> at(timecnt);
    for (auto& t : at) t = r.be(time_size);
    std::vector<std::size_t> idx(timecnt);
    for (auto& i : idx) i = static_cast<std::size_t>(r.be(1));
    std::vector<std::int32_t> type_off(typecnt);
    for (auto& o : type_off) {
        const std::int64_t v = r.be(4);
        r.skip(2);  // isdst, abbreviation index: not needed for offsets
        if (v < -kMaxOffset || v > kMaxOffset) return fail(what + "UTC offset out of range");
        o = static_cast<std::int32_t>(v);
    }
    r.skip(charcnt + isstdcnt + isutcnt);
    if (!r.ok) return fail(what + "truncated TZif file");
    z->initial_off = type_off[0];
    for (std::size_t k = 0; k < timecnt; ++k) {
        if (idx[k] >= typecnt) return fail(what + "corrupt TZif transition");
        if (k > 0 && at[k] <= at[k - 1]) return fail(what + "TZif transitions out of order");
        // Far-away transitions (the "big bang" marker) are outside anything we compute with;
        // dropping them keeps every later sum in int64 range.
        if (at[k] < kMinInstant - kWindow * 40) {
            z->initial_off = type_off[idx[k]];
            continue;
        }
        if (at[k] > kMaxInstant + kWindow * 40) break;
        z->trans_at.push_back(at[k]);
        z->trans_off.push_back(type_off[idx[k]]);
    }
    if (version >= 2 && r.need(2) && bytes[r.pos] == '\n') {
        const std::size_t start = r.pos + 1;
        const std::size_t end = bytes.find('\n', start);
        if (end == std::string_view::npos) return fail(what + "unterminated TZif footer");
        const std::string_view footer = bytes.substr(start, end - start);
        if (!footer.empty()) {
            PosixParser p{footer};
            auto rule = p.parse();
            if (!rule || std::abs(rule->std_off) > kMaxOffset ||
                std::abs(rule->dst_off) > kMaxOffset)
                return fail(what + "unsupported TZif footer '" + std::string(footer) + "'");
            z->rule = *rule;
        }
    }
    return TimeZone(std::move(z));
}

Result<TimeZone> TimeZone::load(std::string_view name) {
    if (!valid_zone_name(name)) return fail("invalid time zone name '" + std::string(name) + "'");
    const std::string path = zoneinfo_dir() + "/" + std::string(name);
    auto bytes = read_file(path, kZoneFileLimit);
    if (!bytes) {
        if (name == "UTC" || name == "Etc/UTC") return utc();
        return fail("unknown time zone '" + std::string(name) + "' (no " + path + ")");
    }
    return from_tzif(name, *bytes);
}

namespace {

// The name /etc/localtime stands for, as fire times show it: the zone its link points to
// (/usr/share/zoneinfo/Europe/Berlin, as timedatectl and tzdata's debconf make it), else
// "localtime" (a copy of the file carries no name).
std::string localtime_name() {
    char target[4096];
    ssize_t n = ::readlink("/etc/localtime", target, sizeof target - 1);
    if (n <= 0) return "localtime";
    std::string_view path(target, static_cast<std::size_t>(n));
    constexpr std::string_view kDir = "zoneinfo/";
    std::size_t at = path.rfind(kDir);
    if (at == std::string_view::npos || at + kDir.size() == path.size()) return "localtime";
    std::string_view name = path.substr(at + kDir.size());
    // posix/ and right/ are the same zones under other rules of leap seconds.
    for (std::string_view tree : {"posix/", "right/"})
        if (name.starts_with(tree)) name.remove_prefix(tree.size());
    return std::string(name);
}

}  // namespace

Result<TimeZone> TimeZone::local() {
    const char* tz = std::getenv("TZ");
    if (!tz) {
        auto bytes = read_file("/etc/localtime", kZoneFileLimit);
        if (!bytes) return utc();
        return from_tzif(localtime_name(), *bytes);
    }
    std::string_view spec = tz;
    if (spec.empty()) return utc();
    if (spec.front() == ':') {
        spec.remove_prefix(1);
        if (!spec.empty() && spec.front() == '/') {
            auto bytes = read_file(std::string(spec), kZoneFileLimit);
            if (!bytes) return fail("TZ: cannot read " + std::string(spec));
            return from_tzif(spec, *bytes);
        }
        return load(spec);
    }
    if (valid_zone_name(spec)) {
        auto zone = load(spec);
        if (zone) return zone;
    }
    auto posix = from_posix(spec);
    if (posix) return posix;
    return fail("TZ: '" + std::string(spec) + "' is neither a zoneinfo name nor a POSIX TZ string");
}

}  // namespace lastcall::cron
