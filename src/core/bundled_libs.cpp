// SPDX-License-Identifier: Apache-2.0
// The one translation unit that compiles the implementations of the bundled fmt and spdlog
// (packaging/bundled.cmake). Debian ships both as headers plus shared libraries only; used
// header-only, every file that logs compiled fmt's and spdlog's implementations again (formatting
// tables, the pattern formatter, the registry): half the build time of the files that log, and
// objects of 15 MB. Built as compiled libraries instead (FMT_HEADER_ONLY unset,
// SPDLOG_COMPILED_LIB set for every file, see bundled.cmake), the other files see declarations,
// and the definitions, with the explicit instantiations the headers declare `extern`, are here.
// With the distribution's shared libraries (LASTCALL_SHARED_DEPS) this file is empty.
#ifdef LASTCALL_BUNDLED_LIBS

#include <fmt/format-inl.h>

FMT_BEGIN_NAMESPACE
namespace detail {
// Declared `extern template` by fmt/format.h when FMT_HEADER_ONLY is unset.
template FMT_API auto thousands_sep_impl<char>(locale_ref) -> thousands_sep_result<char>;
template FMT_API auto thousands_sep_impl<wchar_t>(locale_ref) -> thousands_sep_result<wchar_t>;
template FMT_API auto decimal_point_impl(locale_ref) -> char;
template FMT_API auto decimal_point_impl(locale_ref) -> wchar_t;
}  // namespace detail
FMT_END_NAMESPACE

#include <spdlog/common-inl.h>
#include <spdlog/details/backtracer-inl.h>
#include <spdlog/details/log_msg-inl.h>
#include <spdlog/details/log_msg_buffer-inl.h>
#include <spdlog/details/null_mutex.h>
#include <spdlog/details/os-inl.h>
#include <spdlog/details/periodic_worker-inl.h>
#include <spdlog/details/registry-inl.h>
#include <spdlog/logger-inl.h>
#include <spdlog/pattern_formatter-inl.h>
#include <spdlog/sinks/ansicolor_sink-inl.h>
#include <spdlog/sinks/base_sink-inl.h>
#include <spdlog/sinks/sink-inl.h>
#include <spdlog/spdlog-inl.h>

// The sink class templates whose members the headers only declare in a compiled build: lastcall's
// own sinks derive from base_sink<null_mutex>; the registry builds its default logger on an
// ansicolor stdout sink.
template class SPDLOG_API spdlog::sinks::base_sink<spdlog::details::null_mutex>;
template class SPDLOG_API spdlog::sinks::base_sink<std::mutex>;
template class SPDLOG_API spdlog::sinks::ansicolor_sink<spdlog::details::console_mutex>;
template class SPDLOG_API spdlog::sinks::ansicolor_stdout_sink<spdlog::details::console_mutex>;

#endif
