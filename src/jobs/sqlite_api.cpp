// SPDX-License-Identifier: Apache-2.0
#include "lastcall/jobs/sqlite_api.hpp"

#ifndef LASTCALL_SQLITE_LINKED
#include "lastcall/core/shared_library.hpp"
#endif

namespace lastcall {

#ifdef LASTCALL_SQLITE_LINKED

Result<const SqliteApi*> sqlite_api() {
    // By name: busy_timeout and extended_result_codes, for one, have the same type.
    static const SqliteApi linked{
        .open_v2 = ::sqlite3_open_v2,
        .close_v2 = ::sqlite3_close_v2,
        .busy_timeout = ::sqlite3_busy_timeout,
        .extended_result_codes = ::sqlite3_extended_result_codes,
        .errmsg = ::sqlite3_errmsg,
        .errstr = ::sqlite3_errstr,
        .exec = ::sqlite3_exec,
        .free = ::sqlite3_free,
        .prepare_v2 = ::sqlite3_prepare_v2,
        .finalize = ::sqlite3_finalize,
        .step = ::sqlite3_step,
        .bind_int = ::sqlite3_bind_int,
        .bind_int64 = ::sqlite3_bind_int64,
        .bind_text = ::sqlite3_bind_text,
        .bind_null = ::sqlite3_bind_null,
        .column_type = ::sqlite3_column_type,
        .column_int64 = ::sqlite3_column_int64,
        .column_text = ::sqlite3_column_text,
        .changes = ::sqlite3_changes,
        .last_insert_rowid = ::sqlite3_last_insert_rowid,
        .file_control = ::sqlite3_file_control,
    };
    return &linked;
}

#else

Result<const SqliteApi*> sqlite_api() {
    static SqliteApi lib{};
    static SharedLibraryOnce library("libsqlite3.so.0",
                                     "the run ledger needs SQLite (apt-get install libsqlite3-0)");
    auto st = library.load([](void* h) {
        return resolve_symbol(h, "sqlite3_open_v2", lib.open_v2) &&
               resolve_symbol(h, "sqlite3_close_v2", lib.close_v2) &&
               resolve_symbol(h, "sqlite3_busy_timeout", lib.busy_timeout) &&
               resolve_symbol(h, "sqlite3_extended_result_codes", lib.extended_result_codes) &&
               resolve_symbol(h, "sqlite3_errmsg", lib.errmsg) &&
               resolve_symbol(h, "sqlite3_errstr", lib.errstr) &&
               resolve_symbol(h, "sqlite3_exec", lib.exec) &&
               resolve_symbol(h, "sqlite3_free", lib.free) &&
               resolve_symbol(h, "sqlite3_prepare_v2", lib.prepare_v2) &&
               resolve_symbol(h, "sqlite3_finalize", lib.finalize) &&
               resolve_symbol(h, "sqlite3_step", lib.step) &&
               resolve_symbol(h, "sqlite3_bind_int", lib.bind_int) &&
               resolve_symbol(h, "sqlite3_bind_int64", lib.bind_int64) &&
               resolve_symbol(h, "sqlite3_bind_text", lib.bind_text) &&
               resolve_symbol(h, "sqlite3_bind_null", lib.bind_null) &&
               resolve_symbol(h, "sqlite3_column_type", lib.column_type) &&
               resolve_symbol(h, "sqlite3_column_int64", lib.column_int64) &&
               resolve_symbol(h, "sqlite3_column_text", lib.column_text) &&
               resolve_symbol(h, "sqlite3_changes", lib.changes) &&
               resolve_symbol(h, "sqlite3_last_insert_rowid", lib.last_insert_rowid) &&
               resolve_symbol(h, "sqlite3_file_control", lib.file_control);
    });
    if (!st) return st.error();
    return &lib;
}

#endif

}  // namespace lastcall
