# The two README commands: `make run` (set up, then serve the app) and `make test` (set up, then test).
# Set-up is idempotent: the environment is built once per lock-file hash (scripts/setup.sh).
.PHONY: setup run test

setup:
	./scripts/setup.sh

run: setup
	.venv/bin/python app.py $(ARGS)

test: setup
	./scripts/setup-test-system.sh
	.venv/bin/python -m pytest $(ARGS)
