# Dependencies of the fully static build (-DLASTCALL_STATIC=ON), included from the top
# CMakeLists.txt before lastcall_core is defined; it replaces the entries of LASTCALL_DEPS.
#
# Debian ships spdlog, fmt and toml++ only as shared libraries, and libsystemd cannot be linked
# statically at all, so:
# - spdlog, fmt and toml++ are compiled in (bundled.cmake, included before this file);
# - SQLite comes from libsqlite3.a (bundled.cmake, as in the default dynamic build);
# - sd_notify is spoken directly (LASTCALL_NO_LIBSYSTEMD, see src/notifier.cpp);
# - --user reads /etc/passwd and /etc/group itself (LASTCALL_NO_NSS, see userdb.hpp): glibc's
#   getpwnam in a static binary dlopen()s the host's libnss_* at runtime.
# On userdb.cpp alone: every other object is then compiled exactly as in the default build, so a
# compiler cache shares them between the two (`make test-release` after `make test`).
set_source_files_properties(${CMAKE_SOURCE_DIR}/src/userdb.cpp PROPERTIES
                            COMPILE_DEFINITIONS LASTCALL_NO_NSS=1)
