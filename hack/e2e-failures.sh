#!/usr/bin/env bash
# hack/e2e-failures.sh LOG: print the whole output of every test that failed in a `go test -v` log
# of one or more packages (make e2e's /tmp/hardway-e2e.log). `make e2e` shows only the first line
# of each message (the `_test.go:` lines); a failure's hardway output, kubectl output or journal
# follows on lines of their own, and CI keeps only what was printed. Parallel tests interleave:
# each line belongs to the test named by the last `=== RUN/CONT/NAME/PAUSE` line above it. At most
# the last $E2E_FAIL_LINES (default 300) lines of each failed test.
set -euo pipefail
log=${1:?usage: e2e-failures.sh LOG}
[ -r "$log" ] || { echo "e2e-failures: cannot read $log" >&2; exit 1; }
awk -v max="${E2E_FAIL_LINES:-300}" '
function flush(pkg,   i, name, n, from, j) {
  for (i = 1; i <= nfail; i++) {
    name = fails[i]; n = count[name] + 0; from = n > max ? n - max + 1 : 1
    if (n == 0) continue  # a parent whose subtests failed: their own output follows
    printf "\n==== %s %s: its output (%d lines%s)\n", pkg, name, n, (n > max ? ", the last " max : "")
    for (j = from; j <= n; j++) print lines[name, j]
  }
  delete lines; delete count; delete failed; nfail = 0; cur = ""
}
/^=== (RUN|CONT|NAME|PAUSE) / { cur = $3; next }
/^ *--- FAIL: / { if (!($3 in failed)) { failed[$3] = 1; fails[++nfail] = $3 }; next }
/^ *--- (PASS|SKIP): / { next }
/^(PASS|FAIL)$/ { next }
/^(ok|FAIL)[ \t]+[^ \t]+[ \t]/ { flush($2); next }
cur != "" { lines[cur, ++count[cur]] = $0 }
END { if (nfail) flush("(unfinished)") }
' "$log"
