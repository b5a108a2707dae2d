#!/usr/bin/env bash
# The test suite, as `make test` and `make check` run it:
#   scripts/test.sh quick [PYTEST ARGS]  the tests that start no engine, no server and no browser, on both cores
#   scripts/test.sh all [PYTEST ARGS]    those, then the rest one at a time (they share engines and servers, and an
#                                        engine keeps both cores busy), the container test last
# The quick run sets VLM_DEMO_CHECK=1: a test in it that starts an engine, a server or a browser fails, naming the
# mark it lacks. A run that selects no test (ARGS naming tests of the other kind) is not a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
QUICK="not engine and not server and not browser"
mode=${1:?usage: scripts/test.sh quick|all [pytest args]}
shift

passed() { [ "$1" -eq 0 ] || [ "$1" -eq 5 ]; }  # 5: pytest selected no test

VLM_DEMO_CHECK=1 "$PY" -m pytest -m "$QUICK" -n 2 "$@"
quick=$?
[ "$mode" = quick ] && { passed $quick && exit 0 || exit $quick; }
"$PY" -m pytest -m "not ($QUICK)" "$@"
rest=$?
if [ $quick -eq 5 ] && [ $rest -eq 5 ]; then exit 5; fi
passed $quick || exit $quick
passed $rest || exit $rest
exit 0
