# Dependencies of the fully static build (-DLASTCALL_STATIC=ON), included from the top
# CMakeLists.txt before lastcall_core is defined; it replaces the entries of LASTCALL_DEPS.
#
# Debian ships spdlog, fmt and toml++ only as shared libraries, and libsystemd cannot be linked
# statically at all, so:
# - spdlog and fmt are used header-only (spdlog without SPDLOG_COMPILED_LIB, FMT_HEADER_ONLY);
# - toml++ is header-only unless TOML_HEADER_ONLY=0, which is what its pkg-config file adds, so
#   only its include directory is taken;
# - SQLite comes from libsqlite3.a (libsqlite3-dev). It references dlopen (the linker warns) for
#   loadable extensions only, which lastcall never enables, so nothing is loaded at runtime;
# - sd_notify is spoken directly (LASTCALL_NO_LIBSYSTEMD, see src/notifier.cpp);
# - --user reads /etc/passwd and /etc/group itself (LASTCALL_NO_NSS, see userdb.hpp): glibc's
#   getpwnam in a static binary dlopen()s the host's libnss_* at runtime.
find_package(fmt REQUIRED)
find_package(Threads REQUIRED)

add_library(lastcall_static_spdlog INTERFACE)
target_compile_definitions(lastcall_static_spdlog INTERFACE SPDLOG_FMT_EXTERNAL)
get_target_property(_spdlog_includes spdlog::spdlog_header_only INTERFACE_INCLUDE_DIRECTORIES)
target_include_directories(lastcall_static_spdlog INTERFACE ${_spdlog_includes})
target_link_libraries(lastcall_static_spdlog INTERFACE fmt::fmt-header-only Threads::Threads)

add_library(lastcall_static_tomlpp INTERFACE)
target_include_directories(lastcall_static_tomlpp INTERFACE ${TOMLPP_INCLUDE_DIRS})

find_library(LASTCALL_SQLITE3_ARCHIVE NAMES libsqlite3.a REQUIRED)
add_library(lastcall_static_sqlite3 INTERFACE)
target_include_directories(lastcall_static_sqlite3 INTERFACE ${SQLite3_INCLUDE_DIRS})
target_link_libraries(lastcall_static_sqlite3 INTERFACE ${LASTCALL_SQLITE3_ARCHIVE} m
                      Threads::Threads ${CMAKE_DL_LIBS})

list(TRANSFORM LASTCALL_DEPS REPLACE "^spdlog::spdlog$" lastcall_static_spdlog)
list(TRANSFORM LASTCALL_DEPS REPLACE "^PkgConfig::TOMLPP$" lastcall_static_tomlpp)
list(TRANSFORM LASTCALL_DEPS REPLACE "^SQLite::SQLite3$" lastcall_static_sqlite3)
add_compile_definitions(LASTCALL_NO_NSS=1)
