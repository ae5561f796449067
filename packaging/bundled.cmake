# spdlog, fmt, toml++ and SQLite compiled into lastcall instead of loaded as shared libraries (the
# default, and the static build): included from the top CMakeLists.txt before lastcall_common is
# defined; it replaces entries of LASTCALL_DEPS.
# - spdlog and fmt are compiled once, in src/core/bundled_libs.cpp (LASTCALL_BUNDLED_LIBS), as
#   compiled libraries (SPDLOG_COMPILED_LIB, no FMT_HEADER_ONLY): Debian ships their headers and
#   shared libraries only, and used header-only they were compiled again into every file that logs;
# - toml++ is header-only unless TOML_HEADER_ONLY=0, which is what its pkg-config file adds, so
#   only its include directory is taken;
# - SQLite: the static binary links libsqlite3.a (libsqlite3-dev; it references dlopen, and the
#   linker warns, for loadable extensions only, which lastcall never enables). The default binary
#   loads libsqlite3.so.0 with dlopen when a ledger first opens (jobs/sqlite_api.hpp): linked,
#   Debian's libsqlite3.so (BIND_NOW) cost ~1,600 symbol lookups on every start, and the archive
#   linked in brought libm (SQLite's math functions), 0.3 MiB resident, on every start too.
find_package(fmt REQUIRED)
find_package(Threads REQUIRED)

add_library(lastcall_bundled_spdlog INTERFACE)
target_compile_definitions(lastcall_bundled_spdlog INTERFACE SPDLOG_FMT_EXTERNAL
                           SPDLOG_COMPILED_LIB LASTCALL_BUNDLED_LIBS)
get_target_property(_spdlog_includes spdlog::spdlog_header_only INTERFACE_INCLUDE_DIRECTORIES)
get_target_property(_fmt_includes fmt::fmt-header-only INTERFACE_INCLUDE_DIRECTORIES)
target_include_directories(lastcall_bundled_spdlog INTERFACE ${_spdlog_includes} ${_fmt_includes})
target_link_libraries(lastcall_bundled_spdlog INTERFACE Threads::Threads)

add_library(lastcall_bundled_tomlpp INTERFACE)
target_include_directories(lastcall_bundled_tomlpp INTERFACE ${TOMLPP_INCLUDE_DIRS})

find_library(LASTCALL_SQLITE3_ARCHIVE NAMES libsqlite3.a REQUIRED)
add_library(lastcall_bundled_sqlite3 INTERFACE)
target_include_directories(lastcall_bundled_sqlite3 INTERFACE ${SQLite3_INCLUDE_DIRS})
target_link_libraries(lastcall_bundled_sqlite3 INTERFACE ${LASTCALL_SQLITE3_ARCHIVE} m
                      Threads::Threads ${CMAKE_DL_LIBS})

list(TRANSFORM LASTCALL_DEPS REPLACE "^spdlog::spdlog$" lastcall_bundled_spdlog)
list(TRANSFORM LASTCALL_DEPS REPLACE "^PkgConfig::TOMLPP$" lastcall_bundled_tomlpp)
