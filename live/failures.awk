# failures.awk prints what failed tests said, from `go test -v` output:
# each failed test's name and its messages (at most 30 lines each; the full
# log has the rest). make live runs it when a check fails.
/^=== (RUN|NAME|CONT|PAUSE) / { cur = $3; next }
/^ *--- FAIL: / { failed[$3] = 1; next }
/^ *--- / { next }
/^    +[A-Za-z0-9_]+\.go:[0-9]+: / { add(cur, $0); next }
/^        / && cur != "" { add(cur, $0) }
function add(t, line) {
	if (n[t]++ < 30) msgs[t] = msgs[t] line "\n"
}
END {
	for (t in failed)
		if (t in msgs) printf "%s:\n%s", t, msgs[t]
}
