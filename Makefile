# The README commands: `make run` (set up, then serve the app), `make test` (set up, then the whole suite) and
# `make check` (the quick loop: the tests that start no engine, no server and no browser, on both cores).
# Set-up is idempotent: the environment is built once per lock-file hash (scripts/setup.sh).
.PHONY: setup run test check

setup:
	./scripts/setup.sh

run: setup
	.venv/bin/python app.py $(ARGS)

test: setup
	./scripts/setup-test-system.sh
	.venv/bin/python -m pytest $(ARGS)

check: setup
	VLM_DEMO_CHECK=1 .venv/bin/python -m pytest -m "not engine and not server and not browser" -n 2 $(ARGS)
