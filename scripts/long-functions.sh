#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Lists the functions of src/ longer than LIMIT lines (default 80), longest first, and exits 1
# if there is one: each owner's functions are meant to be read in one sitting (issue 40). A
# function's lines run from its name to its closing brace, its lambdas included.
# Universal Ctags finds the functions and their ends; without it the check cannot run: exit 77
# (ctest's SKIP_RETURN_CODE), so a machine without ctags skips it rather than passes it.
# Usage: scripts/long-functions.sh [LIMIT] [DIR...]
set -eu
limit=${1:-80}
[ $# -gt 0 ] && shift
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -gt 0 ] || set -- "$root/src"
if ! ctags --version 2>/dev/null | grep -q "Universal Ctags"; then
    echo "long-functions: Universal Ctags (ctags) not found: not checked" >&2
    exit 77
fi
# %n: the line of the name, %e: the line of the end; kinds f: function definitions (members
# defined out of their class too).
long=$(ctags -R --languages=C++ --kinds-C++=f --fields=+ne -x --_xformat="%n %e %F %N" "$@" |
    awk -v limit="$limit" '$2 != "" { n = $2 - $1 + 1; if (n > limit) print n, $3 ":" $1, $4 }' |
    sort -rn)
[ -z "$long" ] && exit 0
echo "functions over $limit lines (split them into named steps):"
echo "$long" | sed "s|$root/||"
exit 1
