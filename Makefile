# Thin wrappers around dev.py, which creates .venv and installs on first use.
PY ?= python3

.PHONY: serve test lint bench conformance loadtest
serve:
	$(PY) dev.py serve
test:
	$(PY) dev.py test
lint:
	$(PY) dev.py lint
bench:
	$(PY) dev.py bench
conformance:
	$(PY) dev.py conformance
loadtest:
	$(PY) dev.py install && .venv/bin/python scripts/loadtest.py --clients 64 --duration 60 --compare 120 --write-doc
