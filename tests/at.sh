#!/usr/bin/env bash
# Runs a command as if it were another moment in another zone, with a clock that every
# child process shares (`make test-any-hour`):
#   tests/at.sh ZONE "YYYY-MM-DD HH:MM:SS" -- COMMAND...
#   tests/at.sh Pacific/Kiritimati "2027-01-01 02:00:00" -- .venv/bin/python -m pytest tests/scheduler -q
# libfaketime (Debian's faketime) with a RELATIVE offset (+Ns): an absolute "@time" would
# restart the clock in every new process, so a daemon started by a test would not agree
# with the test about what time it is. The clock runs on from the moment given.
# The exit code is the command's.
set -euo pipefail
[[ $# -ge 4 && $3 == -- ]] || { echo "usage: $0 ZONE 'YYYY-MM-DD HH:MM:SS' -- COMMAND..." >&2; exit 2; }
zone=$1; at=$2; shift 3
command -v faketime >/dev/null || { echo "faketime is missing: apt-get install -y faketime" >&2; exit 2; }
[[ -f /usr/share/zoneinfo/$zone ]] || { echo "unknown time zone '$zone' (not in /usr/share/zoneinfo)" >&2; exit 2; }
target=$(TZ=$zone date -d "$at" +%s) || { echo "cannot read the time '$at' in zone $zone" >&2; exit 2; }
off=$(( target - $(date +%s) ))
exec env TZ="$zone" faketime -f "+${off}s" "$@"
