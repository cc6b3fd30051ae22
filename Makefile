PY ?= python3.12
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test

$(STAMP): pyproject.toml
	@command -v $(PY) >/dev/null || { echo "error: $(PY) not found; install Python 3.12"; exit 2; }
	$(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	WANDB_SILENT=true $(VENV)/bin/launch +recipe=tiny_cpu

test: $(STAMP)
	$(VENV)/bin/python -m pytest -q
