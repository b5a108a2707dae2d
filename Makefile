# The README commands: `make run` (set up, then serve the app), `make test` (set up, then the whole suite) and
# `make check` (the quick loop: the tests that start no engine, no server and no browser, on both cores). `make test`
# runs those first as `make check` does, then the rest one at a time (scripts/test.sh).
# Set-up is idempotent: the environment is built once per lock-file hash (scripts/setup.sh).
.PHONY: setup run test check

setup:
	./scripts/setup.sh

run: setup
	.venv/bin/python app.py $(ARGS)

test: setup
	./scripts/setup-test-system.sh
	./scripts/test.sh all $(ARGS)

check: setup
	./scripts/test.sh quick $(ARGS)
