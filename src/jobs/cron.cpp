// SPDX-License-Identifier: Apache-2.0
#include "lastcall/jobs/cron.hpp"

#include "lastcall/core/duration.hpp"
#include "lastcall/core/read_file.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

namespace lastcall::cron {

namespace {

constexpr std::int64_t kDay = 86400;
// No real zone is further than 26 h from UTC (RFC 8536 bounds utoff near there too); every
// window that must contain "all instants that could show wall time w" uses this margin.
constexpr std::int32_t kMaxOffset = 26 * 3600;
constexpr std::int64_t kWindow = kMaxOffset + 3600;
// Instants accepted by next_after: 0001-01-01 .. 9999-12-31, so no arithmetic can overflow.
constexpr std::int64_t kMinInstant = -62135596800;
constexpr std::int64_t kMaxInstant = 253402300799;

// ---- civil calendar (proleptic Gregorian, H. Hinnant's algorithms; int64, no overflow here) ----

constexpr std::int64_t floor_div(std::int64_t a, std::int64_t b) {
    return a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
}

constexpr std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) {
    y -= m <= 2;
    const std::int64_t era = floor_div(y, 400);
    const std::int64_t yoe = y - era * 400;
    const std::int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    const std::int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

struct Civil {
    std::int64_t year;
    unsigned month;
    unsigned day;
};

constexpr Civil civil_from_days(std::int64_t z) {
    z += 719468;
    const std::int64_t era = floor_div(z, 146097);
    const std::int64_t doe = z - era * 146097;
    const std::int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    const std::int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    const std::int64_t mp = (5 * doy + 2) / 153;
    const unsigned d = static_cast<unsigned>(doy - (153 * mp + 2) / 5 + 1);
    const unsigned m = static_cast<unsigned>(mp < 10 ? mp + 3 : mp - 9);
    return {yoe + era * 400 + (m <= 2), m, d};
}

constexpr unsigned weekday_from_days(std::int64_t z) {  // 0 = Sunday; 1970-01-01 was a Thursday
    return static_cast<unsigned>(z >= -4 ? (z + 4) % 7 : (z + 5) % 7 + 6);
}

constexpr bool is_leap(std::int64_t y) {
    return y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
}

constexpr unsigned days_in_month(std::int64_t y, unsigned m) {
    constexpr unsigned kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && is_leap(y) ? 29 : kDays[m - 1];
}

static_assert(days_from_civil(1970, 1, 1) == 0);
static_assert(weekday_from_days(days_from_civil(2024, 3, 10)) == 0);
static_assert(civil_from_days(days_from_civil(2000, 2, 29)).day == 29);

Error fail(std::string message) {
    return Error{std::move(message)};
}

bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_digit(char c) {
    return c >= '0' && c <= '9';
}
bool is_alpha(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
char lower(char c) {
    return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

bool iequals(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (lower(a[i]) != lower(b[i])) return false;
    return true;
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
    while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
    return s;
}

std::vector<std::string_view> split_ws(std::string_view s) {
    std::vector<std::string_view> out;
    std::size_t i = 0;
    while (i < s.size()) {
        while (i < s.size() && is_space(s[i])) ++i;
        const std::size_t start = i;
        while (i < s.size() && !is_space(s[i])) ++i;
        if (i > start) out.push_back(s.substr(start, i - start));
    }
    return out;
}

// Parses a run of digits into an int, saturating so huge numbers still give a range error
// instead of overflowing.
std::optional<int> parse_uint(std::string_view s) {
    if (s.empty()) return std::nullopt;
    long long v = 0;
    for (char c : s) {
        if (!is_digit(c)) return std::nullopt;
        v = std::min<long long>(v * 10 + (c - '0'), 1000000000);
    }
    return static_cast<int>(v);
}

}  // namespace

// ================================ time zones ================================

// Rule of a POSIX TZ string: "std offset [dst [offset] [,start[/time],end[/time]]]".
struct PosixRule {
    struct When {
        enum Kind { kJulian1, kJulian0, kMonthWeekDay } kind = kMonthWeekDay;
        int month = 0, week = 0, wday = 0, day = 0;
        std::int32_t time = 7200;  // seconds after local midnight; may be negative or > 24 h
    };
    std::int32_t std_off = 0;  // seconds east of UTC (the string itself counts westwards)
    std::int32_t dst_off = 0;
    bool has_dst = false;
    When start, end;
};

struct ZoneData {
    std::string name;
    std::int32_t initial_off = 0;         // before the first transition
    std::vector<std::int64_t> trans_at;   // ascending
    std::vector<std::int32_t> trans_off;  // offset in effect from trans_at[i]
    std::optional<PosixRule> rule;        // from the last transition on (or always if none)
};

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

struct Transition {
    std::int64_t at;
    std::int32_t before;
    std::int32_t after;
};

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

Result<TimeZone> TimeZone::local() {
    const char* tz = std::getenv("TZ");
    if (!tz) {
        auto bytes = read_file("/etc/localtime", kZoneFileLimit);
        if (!bytes) return utc();
        return from_tzif("localtime", *bytes);
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

// ================================ expressions ================================

namespace {

struct FieldSpec {
    const char* name;
    int lo, hi;
    const char* const* names;  // three-letter names for values lo.. (null: numbers only)
};

constexpr const char* kMonthNames[] = {"jan", "feb", "mar", "apr", "may", "jun",
                                       "jul", "aug", "sep", "oct", "nov", "dec"};
constexpr const char* kDayNames[] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"};

constexpr FieldSpec kSecond{"second", 0, 59, nullptr};
constexpr FieldSpec kMinute{"minute", 0, 59, nullptr};
constexpr FieldSpec kHour{"hour", 0, 23, nullptr};
constexpr FieldSpec kMday{"day-of-month", 1, 31, nullptr};
constexpr FieldSpec kMonth{"month", 1, 12, kMonthNames};
constexpr FieldSpec kWday{"day-of-week", 0, 7, kDayNames};  // 7 is Sunday again
constexpr FieldSpec kYear{"year", 1970, 2099, nullptr};     // cronexpr's range (crontab lines)

std::string field_error(const FieldSpec& f, const std::string& what) {
    return std::string(f.name) + " field: " + what;
}

std::string quoted(std::string_view s) {
    return "'" + std::string(s) + "'";
}

// One value: a number or (month / day-of-week only) a three-letter name. The message has no
// field prefix so that range errors can wrap it.
Result<int> parse_value(const FieldSpec& f, std::string_view tok) {
    if (tok.empty()) return fail("missing value");
    if (is_digit(tok.front())) {
        auto v = parse_uint(tok);
        if (!v) return fail(quoted(tok) + " is not a number");
        if (*v < f.lo || *v > f.hi)
            return fail(std::string(tok) + " is out of range " + std::to_string(f.lo) + "-" +
                        std::to_string(f.hi));
        return *v;
    }
    if (f.names) {
        const int count = &f == &kMonth ? 12 : 7;
        for (int k = 0; k < count; ++k)
            if (iequals(tok, f.names[k])) return f.lo + k;
        return fail("unknown name " + quoted(tok));
    }
    return fail(quoted(tok) + " is not a number");
}

// A comma-separated list of "*", "v", "a-b", each optionally "/step": mark(v) for each value v
// it lists.
template <class Mark>
Status parse_items(const FieldSpec& f, std::string_view text, Mark&& mark) {
    std::size_t start = 0;
    while (start <= text.size()) {
        std::size_t comma = text.find(',', start);
        if (comma == std::string_view::npos) comma = text.size();
        const std::string_view item = text.substr(start, comma - start);
        start = comma + 1;
        if (item.empty()) return fail(field_error(f, "empty list item in " + quoted(text)));

        std::string_view base = item;
        int step = 1;
        bool stepped = false;
        if (const std::size_t slash = item.find('/'); slash != std::string_view::npos) {
            base = item.substr(0, slash);
            const std::string_view st = item.substr(slash + 1);
            auto v = parse_uint(st);
            if (!v) return fail(field_error(f, "bad step " + quoted(st) + " in " + quoted(item)));
            const int span = f.hi - f.lo + 1;
            if (*v < 1 || *v > span)
                return fail(field_error(f, "step " + std::string(st) + " in " + quoted(item) +
                                               " is out of range 1-" + std::to_string(span)));
            step = *v;
            stepped = true;
        }
        int lo, hi;
        if (base == "*") {
            lo = f.lo, hi = f.hi;
        } else if (const std::size_t dash = base.find('-'); dash != std::string_view::npos) {
            auto a = parse_value(f, base.substr(0, dash));
            if (!a) return fail(field_error(f, "range " + quoted(item) + ": " + a.error().message));
            auto b = parse_value(f, base.substr(dash + 1));
            if (!b) return fail(field_error(f, "range " + quoted(item) + ": " + b.error().message));
            lo = *a, hi = *b;
            // "FRI-SUN": Sunday closing a range means 7, as in croniter and most crons.
            if (&f == &kWday && hi == 0 && lo > 0) hi = 7;
            if (lo > hi) return fail(field_error(f, "range " + quoted(item) + " is reversed"));
        } else {
            auto v = parse_value(f, base);
            if (!v) return fail(field_error(f, v.error().message));
            lo = *v;
            hi = stepped ? f.hi : *v;  // "a/n" means a, a+n, ... up to the field's maximum
        }
        for (int v = lo; v <= hi; v += step) mark(v);
        if (comma == text.size()) break;
    }
    return Ok{};
}

// Bit v set = v matches.
Result<std::uint64_t> parse_field(const FieldSpec& f, std::string_view text) {
    std::uint64_t bits = 0;
    auto st = parse_items(f, text, [&](int v) { bits |= std::uint64_t{1} << v; });
    if (!st) return st.error();
    return bits;
}

// ---- cronexpr's shapes, which decide how many words of a crontab line are its schedule ----

constexpr const char* kMonthLong[] = {"january",   "february", "march",    "april",
                                      "may",       "june",     "july",     "august",
                                      "september", "october",  "november", "december"};
constexpr const char* kDayLong[] = {"sunday",   "monday", "tuesday", "wednesday",
                                    "thursday", "friday", "saturday"};

// One value as cronexpr's patterns take it: 1-2 digits within the field's range (a year: 4
// digits, 1970-2099), or for months and weekdays a three-letter or full name, any case.
bool cronexpr_value(const FieldSpec& f, std::string_view v) {
    if (!v.empty() && std::all_of(v.begin(), v.end(), is_digit)) {
        if (&f == &kYear ? v.size() != 4 : v.size() > 2) return false;
        const int n = *parse_uint(v);
        return n >= f.lo && n <= f.hi;
    }
    if (!f.names) return false;
    const bool month = &f == &kMonth;
    for (int k = 0; k < (month ? 12 : 7); ++k)
        if (iequals(v, f.names[k]) || iequals(v, month ? kMonthLong[k] : kDayLong[k])) return true;
    return false;
}

// "v" or "v-v".
bool cronexpr_span(const FieldSpec& f, std::string_view s) {
    const std::size_t dash = s.find('-');
    if (dash == std::string_view::npos) return cronexpr_value(f, s);
    return cronexpr_value(f, s.substr(0, dash)) && cronexpr_value(f, s.substr(dash + 1));
}

// One list item: "*" or "?", "v", "v-v", "*/n", "v/n", "v-v/n", and cronexpr's L, W and #
// forms (which lastcall then refuses by name: the line is still read with this many fields).
bool cronexpr_item(const FieldSpec& f, std::string_view item) {
    if (item == "*" || item == "?") return true;
    if (const std::size_t slash = item.find('/'); slash != std::string_view::npos) {
        const std::string_view step = item.substr(slash + 1), base = item.substr(0, slash);
        if (step.empty() || !std::all_of(step.begin(), step.end(), is_digit)) return false;
        return base == "*" || cronexpr_span(f, base);
    }
    if (cronexpr_span(f, item)) return true;
    const auto ends_with = [&](std::string_view tail) {
        return item.size() > tail.size() && iequals(item.substr(item.size() - tail.size()), tail);
    };
    if (&f == &kMday)
        return iequals(item, "l") || iequals(item, "lw") ||
               (ends_with("w") && cronexpr_value(f, item.substr(0, item.size() - 1)));
    if (&f == &kWday) {
        if (ends_with("l")) return cronexpr_value(f, item.substr(0, item.size() - 1));
        const std::size_t hash = item.find('#');
        return hash != std::string_view::npos && hash + 2 == item.size() && item[hash + 1] >= '1' &&
               item[hash + 1] <= '5' && cronexpr_value(f, item.substr(0, hash));
    }
    return false;
}

// A field: comma-separated items (cronexpr skips empty ones, but needs one at least).
bool cronexpr_field(const FieldSpec& f, std::string_view text) {
    bool any = false;
    for (std::size_t start = 0; start <= text.size();) {
        std::size_t comma = text.find(',', start);
        if (comma == std::string_view::npos) comma = text.size();
        const std::string_view item = text.substr(start, comma - start);
        if (!item.empty() && !cronexpr_item(f, item)) return false;
        any = any || !item.empty();
        start = comma + 1;
    }
    return any;
}

// "@every" durations: lastcall's one duration grammar (core/duration) with days (24 h, not
// calendar days) and a bound of a century, in whole seconds.
Result<std::int64_t> parse_interval(std::string_view text) {
    const std::string what = "@every: ";
    if (text.empty()) return fail(what + "missing duration (e.g. @every 30s, @every 1h30m)");
    DurationGrammar grammar{.days = true, .max_seconds = 100 * 366 * kDay, .max_text = "100 years"};
    auto d = parse_duration(text, grammar);
    if (!d) return fail(what + d.error().message);
    if (d->count() % 1000 != 0)
        return fail(what + "sub-second intervals are not supported: " + quoted(text));
    if (d->count() == 0) return fail(what + "interval must be positive: " + quoted(text));
    return d->count() / 1000;
}

struct Macro {
    const char* name;
    const char* fields;
};
constexpr Macro kMacros[] = {
    {"@yearly", "0 0 0 1 1 *"}, {"@annually", "0 0 0 1 1 *"}, {"@monthly", "0 0 0 1 * *"},
    {"@weekly", "0 0 0 * * 0"}, {"@daily", "0 0 0 * * *"},    {"@midnight", "0 0 0 * * *"},
    {"@hourly", "0 0 * * * *"},
};

}  // namespace

Result<Schedule> parse(std::string_view expr, const TimeZone* default_zone, Fields layout) {
    Schedule s;
    std::string_view rest = trim(expr);
    s.text_ = std::string(rest);

    std::optional<TimeZone> zone;
    for (std::string_view prefix : {"CRON_TZ=", "TZ="}) {
        if (rest.size() >= prefix.size() && iequals(rest.substr(0, prefix.size()), prefix)) {
            std::size_t end = prefix.size();
            while (end < rest.size() && !is_space(rest[end])) ++end;
            const std::string_view name = rest.substr(prefix.size(), end - prefix.size());
            if (name.empty()) return fail(std::string(prefix) + " needs a zone name");
            auto z = TimeZone::load(name);
            if (!z)
                return fail(std::string(prefix.substr(0, prefix.size() - 1)) + ": " +
                            z.error().message);
            zone = *z;
            rest = trim(rest.substr(end));
            break;
        }
    }
    if (rest.empty()) return fail("empty cron expression");

    std::vector<std::string_view> fields = split_ws(rest);
    if (fields.front().front() == '@') {
        const std::string_view macro = fields.front();
        if (iequals(macro, "@every")) {
            if (fields.size() != 2) return fail("@every takes one duration, e.g. '@every 1h30m'");
            auto iv = parse_interval(fields[1]);
            if (!iv) return iv.error();
            s.interval_ = std::chrono::seconds{*iv};
            if (zone) s.zone_ = *zone;  // irrelevant to intervals, kept for display
            return s;
        }
        const Macro* found = nullptr;
        for (const auto& m : kMacros)
            if (iequals(macro, m.name)) found = &m;
        if (!found) {
            if (iequals(macro, "@reboot"))
                return fail("@reboot is not a schedule; start the job with the supervisor instead");
            return fail("unknown macro " + quoted(macro));
        }
        if (fields.size() != 1)
            return fail(std::string(found->name) + " takes no fields, got " + quoted(rest));
        fields = split_ws(found->fields);
        layout = Fields::Lastcall;  // a macro's fields start with the second
    }
    const bool crontab = layout == Fields::Crontab;
    if (fields.size() != 5 && fields.size() != 6 && !(crontab && fields.size() == 7))
        return fail("expected 5 fields (minute hour day-of-month month day-of-week), " +
                    std::string(crontab ? "6 with a year last, 7 with seconds first and a year last"
                                        : "6 with leading seconds") +
                    ", or an @macro; got " + std::to_string(fields.size()));
    // Normalised to seconds, the 5, and a year: the 5 fire at second 0 in any year, a crontab's
    // 6 end in the year, lastcall's 6 start with the second.
    if (fields.size() == 5 || (crontab && fields.size() == 6)) fields.insert(fields.begin(), "0");
    if (fields.size() == 6) fields.push_back("*");

    const FieldSpec* specs[] = {&kSecond, &kMinute, &kHour, &kMday, &kMonth, &kWday};
    std::uint64_t bits[6];
    for (int k = 0; k < 6; ++k) {
        auto b = parse_field(*specs[k], fields[static_cast<std::size_t>(k)]);
        if (!b) return b.error();
        bits[k] = *b;
    }
    s.year_star_ = fields[6] == "*";
    if (!s.year_star_) {
        auto st = parse_items(kYear, fields[6], [&](int y) { s.years_.set(y - kYear.lo); });
        if (!st) return st.error();
    }
    s.seconds_ = bits[0];
    s.minutes_ = bits[1];
    s.hours_ = static_cast<std::uint32_t>(bits[2]);
    s.mdays_ = static_cast<std::uint32_t>(bits[3]);
    s.months_ = static_cast<std::uint16_t>(bits[4]);
    s.wdays_ = static_cast<std::uint8_t>((bits[5] | (bits[5] >> 7)) & 0x7f);  // 7 -> Sunday
    s.mday_star_ = fields[3].front() == '*';
    s.wday_star_ = fields[5].front() == '*';

    // When the day fields combine with AND, a date that never exists ("30 FEB") would make
    // next_after search in vain; refuse it here. (With OR, the weekday alone always matches.)
    if (s.mday_star_ || s.wday_star_) {
        bool possible = false;
        for (unsigned m = 1; m <= 12; ++m)
            if ((s.months_ >> m) & 1)
                for (unsigned d = 1; d <= days_in_month(2000, m); ++d)  // 2000: leap year
                    possible = possible || ((s.mdays_ >> d) & 1);
        if (!possible)
            return fail("day-of-month field: " + quoted(fields[3]) +
                        " never occurs in the months of " + quoted(fields[4]));
    }
    // A year field can rule out every date the other fields allow (29 FEB 2027).
    if (!s.year_star_) {
        const std::int64_t first = *s.year_from(kYear.lo);
        if (!s.next_wall(days_from_civil(first, 1, 1) * kDay))
            return fail("year field: " + quoted(fields[6]) + " has no date that the other fields " +
                        "allow");
    }

    if (zone) {
        s.zone_ = *zone;
    } else if (default_zone) {
        s.zone_ = *default_zone;
    } else {
        auto local = TimeZone::local();
        if (!local) return local.error();
        s.zone_ = *local;
    }
    return s;
}

Schedule Schedule::anchored_at(sys_seconds start) const {
    Schedule copy = *this;
    copy.anchor_ = start;
    return copy;
}

bool Schedule::day_matches(std::int64_t days, unsigned mday) const {
    const bool by_mday = (mdays_ >> mday) & 1;
    const bool by_wday = (wdays_ >> weekday_from_days(days)) & 1;
    return mday_star_ || wday_star_ ? by_mday && by_wday : by_mday || by_wday;
}

std::optional<std::int64_t> Schedule::year_from(std::int64_t y) const {
    if (year_star_) return y;
    for (std::int64_t k = std::max<std::int64_t>(y, kYear.lo); k <= kYear.hi; ++k)
        if (years_.test(static_cast<std::size_t>(k - kYear.lo))) return k;
    return std::nullopt;
}

namespace {
int next_bit(std::uint64_t mask, int from) {
    if (from >= 64) return -1;
    const std::uint64_t rest = mask & (~std::uint64_t{0} << from);
    return rest ? std::countr_zero(rest) : -1;
}
}  // namespace

// The first matching wall-clock time >= wall (seconds since the local epoch), within 400 years.
std::optional<std::int64_t> Schedule::next_wall(std::int64_t wall) const {
    std::int64_t days = floor_div(wall, kDay);
    std::int64_t sod = wall - days * kDay;
    Civil c = civil_from_days(days);
    // 400 Gregorian years repeat weekdays exactly, so a date that exists at all occurs within.
    std::int64_t limit = days + 146097 + 366;
    while (days <= limit) {
        if (const auto year = year_from(c.year); year != c.year) {
            if (!year) return std::nullopt;
            c = {*year, 1, 1};
            days = days_from_civil(c.year, 1, 1);
            limit = std::max(limit, days + 366);  // the years named may lie beyond the cycle
            sod = 0;
            continue;
        }
        if (!((months_ >> c.month) & 1)) {
            c.month = c.month == 12 ? 1 : c.month + 1;
            c.year += c.month == 1;
            c.day = 1;
            days = days_from_civil(c.year, c.month, 1);
            sod = 0;
            continue;
        }
        if (day_matches(days, c.day)) {
            const int h0 = static_cast<int>(sod / 3600), m0 = static_cast<int>(sod / 60 % 60),
                      s0 = static_cast<int>(sod % 60);
            for (int h = next_bit(hours_, h0); h >= 0; h = next_bit(hours_, h + 1)) {
                for (int m = next_bit(minutes_, h == h0 ? m0 : 0); m >= 0;
                     m = next_bit(minutes_, m + 1)) {
                    const int s = next_bit(seconds_, h == h0 && m == m0 ? s0 : 0);
                    if (s >= 0) return days * kDay + h * 3600 + m * 60 + s;
                }
            }
        }
        ++days;
        sod = 0;
        if (++c.day > days_in_month(c.year, c.month)) {
            c.day = 1;
            c.month = c.month == 12 ? 1 : c.month + 1;
            c.year += c.month == 1;
        }
    }
    return std::nullopt;
}

std::optional<sys_seconds> Schedule::next_after(sys_seconds t) const {
    const std::int64_t now = t.time_since_epoch().count();
    if (now < kMinInstant || now > kMaxInstant) return std::nullopt;
    if (is_interval()) {
        const std::int64_t iv = interval_.count();
        const std::int64_t a = anchor_.time_since_epoch().count();
        if (a < kMinInstant || a > kMaxInstant) return std::nullopt;
        return sys_seconds{std::chrono::seconds{a + (floor_div(now - a, iv) + 1) * iv}};
    }

    // Each matching wall time fires at zone_.resolve(wall), which never decreases as wall
    // grows. So the answer is resolve() of the first match at or after the first wall time
    // that resolves past `now`. That is the next second of local time, except in the second
    // pass of a fall-back hour: those wall times already fired in the first pass, so skip to
    // the end of the repeat.
    std::int64_t wall = zone_.to_local(t).time_since_epoch().count() + 1;
    auto resolved = [&](std::int64_t w) {
        return zone_.resolve(local_seconds{std::chrono::seconds{w}}).time_since_epoch().count();
    };
    if (resolved(wall) <= now) {
        std::vector<Transition> tr;
        changes(*zone_.data_, now - kWindow, now, tr);
        for (const auto& x : tr)
            if (x.before > x.after && now < x.at + (x.before - x.after))
                wall = std::max(wall, x.at + x.before);
    }
    // Bounded for safety only; with consistent zone data the first candidate is the answer.
    for (int guard = 0; guard < 100000; ++guard) {
        auto w = next_wall(wall);
        if (!w) return std::nullopt;
        const std::int64_t u = resolved(*w);
        if (u > now) {
            if (u > kMaxInstant) return std::nullopt;
            return sys_seconds{std::chrono::seconds{u}};
        }
        wall = *w + 1;
    }
    return std::nullopt;
}

std::size_t crontab_schedule_words(const std::vector<std::string_view>& words) {
    if (words.empty()) return 0;
    if (words.front().front() == '@') return iequals(words.front(), "@every") ? 2 : 1;
    // supercronic tries 7, then 6, then 5 fields, and takes the first that cronexpr parses.
    static constexpr const FieldSpec* kSeven[] = {&kSecond, &kMinute, &kHour, &kMday,
                                                  &kMonth,  &kWday,   &kYear};
    for (const std::size_t n : {std::size_t{7}, std::size_t{6}}) {
        if (words.size() <= n) continue;  // no word would be left for the command
        const FieldSpec* const* spec = kSeven + (7 - n);
        bool fits = true;
        for (std::size_t k = 0; k < n && fits; ++k) fits = cronexpr_field(*spec[k], words[k]);
        if (fits) return n;
    }
    return 5;
}

}  // namespace lastcall::cron
