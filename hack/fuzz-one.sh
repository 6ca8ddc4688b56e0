#!/usr/bin/env bash
# fuzz-one.sh PACKAGE:FUNC FUZZTIME — one fuzz target for FUZZTIME, run by
# make fuzz. A failure fails, except one the go command reports when its own
# deadline expires before fuzzing began ("context deadline exceeded" while
# gathering baseline coverage on a busy machine; golang/go#48157-style): then
# no input failed and none was written to testdata/fuzz. That case is run
# once more with three times the time; failing again fails.
set -u
target=$1 fuzztime=$2
pkg=${target%%:*} fn=${target##*:}
go=${GO:-go}

run() {
	"$go" test -run '^$' -fuzz "^${fn}\$" -fuzztime "$1" -fuzzminimizetime 100x -parallel 1 "$pkg" 2>&1
}

deadline_only() { # output of a failed run: true if nothing but the deadline failed
	grep -q 'context deadline exceeded' <<<"$1" &&
		! grep -qE 'Failing input written|--- FAIL: [^ ]+/' <<<"$1"
}

out=$(run "$fuzztime")
rc=$?
if [ $rc -ne 0 ] && deadline_only "$out"; then
	echo "fuzz $fn ($fuzztime): deadline expired before fuzzing began; once more for 3x" >&2
	n=${fuzztime%%[!0-9]*} unit=${fuzztime#"$n"}
	longer=$((n * 3))$unit # 10s → 30s, 100x → 300x
	out=$(run "$longer")
	rc=$?
	fuzztime=$longer
fi
echo "fuzz $fn ($fuzztime): $(tail -1 <<<"$out")"
if [ $rc -ne 0 ]; then
	echo "$out"
	exit 255 # stops xargs
fi
