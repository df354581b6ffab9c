# The few commands people need. Everything runs from .venv (scripts/setup.sh makes it).
.PHONY: setup test demo up lint format bench schemas docs

setup:
	scripts/setup.sh

test:
	scripts/test.sh

# Flags pass through: make demo ARGS=--qlora, make demo ARGS='--exit --port 8001'.
demo:
	scripts/demo.sh $(ARGS)

up: setup
	.venv/bin/trm up

lint: setup
	.venv/bin/ruff check core app worker trm_mcp tests bench
	.venv/bin/mypy core app worker trm_mcp

format: setup
	.venv/bin/ruff format core app worker trm_mcp tests bench
	.venv/bin/ruff check --fix core app worker trm_mcp tests bench

bench: setup
	.venv/bin/python bench/service.py

schemas: setup
	.venv/bin/trm schemas --out specs/schemas

# The docs site into site/, links and anchors checked; the reference pages regenerated first.
docs: setup
	.venv/bin/python scripts/docs_reference.py
	.venv/bin/mkdocs build --strict
