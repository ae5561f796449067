// SPDX-License-Identifier: Apache-2.0
// What differs between the default binary and the fully static one (lastcall-static), as facts
// the code asks at run time. src/core/linkage.cpp is compiled once for each binary
// (CMakeLists.txt): every other object is shared between them.
#pragma once

namespace lastcall {

// Whether this binary can load a shared library (libpq, libmicrohttpd) with dlopen. The default
// binary can; the static one cannot: glibc's dlopen in a static binary works only with the very
// glibc it was linked with, which an image built FROM scratch does not have.
bool can_load_shared_libraries();

// Where the static binary finds its dynamically linked twin (core/twin.hpp), relative to the
// directory it runs from: "../libexec/lastcall/lastcall" for the .deb's /usr/bin/lastcall.
// nullptr in the dynamic build, which is the twin.
const char* twin_relative_path();

}  // namespace lastcall
