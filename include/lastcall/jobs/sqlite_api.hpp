// SPDX-License-Identifier: Apache-2.0
// The SQLite functions the run ledger calls, as one table. The default binary loads
// libsqlite3.so.0 with dlopen when the first ledger opens: a run without jobs maps none of
// SQLite and no libm (which SQLite's math functions need), 0.3 MiB of resident memory and a
// library load on every start (issue 18). The static binary and a LASTCALL_SHARED_DEPS build
// have SQLite linked in, and the table points at it. src/jobs/sqlite_api.cpp is compiled once for
// each binary, like core/linkage.cpp.
#pragma once

#include <sqlite3.h>

#include "lastcall/core/error.hpp"

namespace lastcall {

struct SqliteApi {
    decltype(&::sqlite3_open_v2) open_v2;
    decltype(&::sqlite3_close_v2) close_v2;
    decltype(&::sqlite3_busy_timeout) busy_timeout;
    decltype(&::sqlite3_extended_result_codes) extended_result_codes;
    decltype(&::sqlite3_errmsg) errmsg;
    decltype(&::sqlite3_errstr) errstr;
    decltype(&::sqlite3_exec) exec;
    decltype(&::sqlite3_free) free;
    decltype(&::sqlite3_prepare_v2) prepare_v2;
    decltype(&::sqlite3_finalize) finalize;
    decltype(&::sqlite3_step) step;
    decltype(&::sqlite3_bind_int) bind_int;
    decltype(&::sqlite3_bind_int64) bind_int64;
    decltype(&::sqlite3_bind_text) bind_text;
    decltype(&::sqlite3_bind_null) bind_null;
    decltype(&::sqlite3_column_type) column_type;
    decltype(&::sqlite3_column_int64) column_int64;
    decltype(&::sqlite3_column_text) column_text;
    decltype(&::sqlite3_changes) changes;
    decltype(&::sqlite3_last_insert_rowid) last_insert_rowid;
    decltype(&::sqlite3_file_control) file_control;
};

// Loaded (or pointed at the linked SQLite) once per process, never unloaded. The error says
// which package is missing.
Result<const SqliteApi*> sqlite_api();

}  // namespace lastcall
