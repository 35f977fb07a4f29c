# Everything runs from the repository's own virtual environment, created on first use.
VENV      := .venv
PYTHON    := $(VENV)/bin/python
SUBMITTED ?= sample_class/submitted
OUT       ?= grading

export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export MPLBACKEND := Agg

.PHONY: setup grade report test release sample-class clean

setup: $(VENV)/.installed sandbox

$(VENV)/.installed: requirements.txt
	python3 -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --upgrade pip
	$(PYTHON) -m pip install --quiet -r requirements.txt
	touch $@

# Student code runs inside bubblewrap when it is available; install it where we may.
sandbox:
	@command -v bwrap >/dev/null 2>&1 || \
	  { command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && \
	    apt-get install -y -qq bubblewrap >/dev/null 2>&1; } || \
	  echo "note: bubblewrap (bwrap) is not installed; student code will run without a sandbox"

## Grade every submission under $(SUBMITTED)/<student>/<assignment>/ (the sample class by default).
grade: setup
	$(PYTHON) -m autograder grade-class --submitted $(SUBMITTED) --out $(OUT)

## The course's own test suite.
report: setup
	$(PYTHON) -m autograder report --out $(OUT)

test: setup
	$(PYTHON) -m pytest tests

## Regenerate exercises/ from solutions/ with nbgrader generate_assignment.
release: setup
	$(PYTHON) -m autograder release

## Rebuild the sample class from the released notebooks (after `make release`).
sample-class: setup
	$(PYTHON) -m tests.sample_class

clean:
	rm -rf $(OUT) gradebook.db .pytest_cache
