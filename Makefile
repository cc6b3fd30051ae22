PY ?= python3.12
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test test-all test-tools

$(STAMP): pyproject.toml
	@command -v $(PY) >/dev/null || { echo "error: $(PY) not found; install Python 3.12"; exit 2; }
	$(PY) -m venv $(VENV)
	# compat: the checkout itself on sys.path, so Hydra's plugin scan finds hydra_plugins/ in it
	# (the default editable finder hides it from pkgutil, and the launch sweeper with it).
	$(VENV)/bin/pip install -q -e '.[test,hf]' --config-settings editable_mode=compat
	touch $(STAMP)

demo: $(STAMP)
	WANDB_SILENT=true $(VENV)/bin/launch +recipe=tiny_cpu

# The quick tier: tests/unit, and one test of each stage through the real M-FSDP (a 1-rank and
# a 2-rank run, a sweep with its report, a resume): minutes, for the edit-test loop.
test: $(STAMP)
	$(VENV)/bin/python -m pytest -q -m "unit or quick"

# Every tier (the optional ones skip, saying why, without `make test-tools`): what CI runs.
test-all: $(STAMP)
	$(VENV)/bin/python -m pytest -q

# The optional tiers' tools (root and apt, Debian/Ubuntu): Chromium for the sweep report's browser
# test, Slurm and MariaDB for tests/slurm. Without them those tests skip and say why; .ci/run
# installs them first, so CI runs every tier.
test-tools:
	@command -v chromium >/dev/null || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q chromium; }
	tests/slurm/cluster.sh install
