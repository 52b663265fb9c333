#!/bin/sh
# install-venv.sh VENV REQUIREMENTS LOG [CHECK]: makes a Python virtual
# environment at VENV with exactly the packages REQUIREMENTS pins, from
# PyPI (pip --no-deps: the file lists every package, so pip resolves
# nothing and installs nothing else), then runs the Python code CHECK in it.
# The install is logged to LOG and timed. On success VENV/.complete is
# written; on failure the half-made VENV is removed and the last line of
# stdout says why, for the caller's skip message.
set -u
venv=$1 req=$2 log=$3 check=${4:-}
py=${PYTHON:-python3}
start=$(date +%s)
mkdir -p "$(dirname "$venv")" "$(dirname "$log")"
fail() {
	echo "$(date -u +%FT%TZ) failed: $1" >>"$log"
	rm -rf "$venv"
	echo "installing $(basename "$venv") failed after $(($(date +%s) - start)) s: $1 (log: $log)"
	exit 1
}
echo "$(date -u +%FT%TZ) installing $req into $venv with $($py --version 2>&1)" >"$log"
rm -rf "$venv"
$py -m venv "$venv" >>"$log" 2>&1 || fail "$py -m venv did not make a virtual environment"
"$venv/bin/python" -m pip install --disable-pip-version-check --no-input --no-deps -r "$req" >>"$log" 2>&1 ||
	fail "pip install -r $req: $(grep -E '^ERROR' "$log" | tail -1)"
if [ -n "$check" ]; then
	"$venv/bin/python" -c "$check" >>"$log" 2>&1 || fail "it does not run here: $(tail -1 "$log")"
fi
touch "$venv/.complete"
echo "$(date -u +%FT%TZ) installed in $(($(date +%s) - start)) s" >>"$log"
echo "installed $(basename "$venv") in $(($(date +%s) - start)) s (log: $log)"
