# Everything runs from the repository's own virtual environment, created on first use.
VENV      := .venv
PYTHON    := $(VENV)/bin/python
GRADER    := $(PYTHON) -m autograder

# `make grade` with no SUBMITTED grades the sample class into its own folder and gradebook, so
# the demo never touches the course's grading/ and gradebook.db.
ifeq ($(origin SUBMITTED), undefined)
SUBMITTED := sample_class/submitted
OUT       ?= sample_class/graded
DB        ?= sqlite:///$(CURDIR)/sample_class/gradebook.db
# The demo's students have numbers of their own, drawn from a demo secret made on first use (the
# sample class's grades do not depend on it); the course's own secret is never made silently.
grade: export COURSE_VARIANT_SECRET := $(HOME)/.cache/attention-course/demo-variant-secret
grade: DEMO := 1
else
OUT       ?= grading
DB        ?= sqlite:///$(CURDIR)/gradebook.db
endif
# make merge and make lms-push use what they are told, or the course's own grading/ and gradebook.db.
COURSE_OUT := $(if $(filter command line environment,$(origin OUT)),$(OUT),grading)
COURSE_DB  := $(if $(filter command line environment,$(origin DB)),$(DB),sqlite:///$(CURDIR)/gradebook.db)
# Optional filters for make grade: STUDENT=glob ASSIGNMENT=id SHARD=K/N JOBS=n FORCE=1
GRADE_ARGS := $(if $(STUDENT),--student '$(STUDENT)') $(if $(ASSIGNMENT),--assignment $(ASSIGNMENT)) \
              $(if $(SHARD),--shard $(SHARD)) $(if $(JOBS),--jobs $(JOBS)) $(if $(FORCE),--force)

# make grade-slurm: the filters above, and PARTITION=, ACCOUNT=, TIME=, MEM= (per shard), WAIT=1
SLURM_ARGS := $(if $(STUDENT),--student '$(STUDENT)') $(if $(ASSIGNMENT),--assignment $(ASSIGNMENT)) \
              $(if $(FORCE),--force) $(if $(PARTITION),--partition $(PARTITION)) $(if $(ACCOUNT),--account $(ACCOUNT)) \
              $(if $(TIME),--time $(TIME)) $(if $(MEM),--mem $(MEM)) $(if $(WAIT),--wait)

export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export MPLBACKEND := Agg

.PHONY: setup sandbox grade serve check-server report test test-all check exercise release sample-class bench merge student-kit gradescope \
        push-collect push-post lms clean-demo grade-slurm k8s-manifests lms-push lms-keys variant-secret variants hub

setup: $(VENV)/.installed $(VENV)/checkov/.installed sandbox
	@# The grader's own bytecode, for every process it starts (the checks compile nothing when it is
	@# up to date); Python would write it itself unless PYTHONDONTWRITEBYTECODE is set.
	@$(PYTHON) -m compileall -qq -j 0 autograder >/dev/null 2>&1 || true

$(VENV)/.installed: requirements.txt
	python3 -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --upgrade pip
	$(PYTHON) -m pip install --quiet --no-compile -r requirements.txt
	@# Byte-compile on every core instead of pip's one file at a time (60 s instead of 75 s here);
	@# like pip, files that do not compile (templates, examples) are left as they are.
	$(PYTHON) -m compileall -qq -j 0 $(VENV)/lib >/dev/null 2>&1 || true
	touch $@

# checkov, the policy scanner the tests run on the Kubernetes manifests, in a virtual environment of
# its own: its pins contradict the course's (requirements-checkov.txt says which).
$(VENV)/checkov/.installed: requirements-checkov.txt
	python3 -m venv $(VENV)/checkov
	$(VENV)/checkov/bin/python -m pip install --quiet --no-compile -r requirements-checkov.txt
	touch $@

# Student code runs inside bubblewrap; install it where we may (root with apt-get).
sandbox:
	@command -v bwrap >/dev/null 2>&1 || \
	  { command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && \
	    apt-get install -y -qq bubblewrap >/dev/null 2>&1; } || \
	  echo "note: bubblewrap (bwrap) is not installed: grading will refuse to run student code"

## Grade every submission under $(SUBMITTED)/<student>/<assignment>/ (the sample class by default).
grade: setup
	$(if $(DEMO),@$(GRADER) variant-secret --if-missing --out $(OUT) >/dev/null)
	$(GRADER) grade-class --submitted $(SUBMITTED) --out $(OUT) --db $(DB) $(GRADE_ARGS)

## A grading service that keeps torch, the suites and started sandboxes warm for make grade (until Ctrl-C).
serve: setup
	$(GRADER) serve $(if $(JOBS),--jobs $(JOBS))

## Students' notebooks graded on demand, over HTTP, as they call check() (course.yml's checks:, docs/checks.md;
## until Ctrl-C): ASSIGNMENT=id for one, JOBS=n grading processes, PORT=n.
check-server: setup
	$(GRADER) check-server --out $(COURSE_OUT) $(if $(ASSIGNMENT),--assignment $(ASSIGNMENT)) $(if $(JOBS),--jobs $(JOBS)) \
	  $(if $(PORT),--port $(PORT))

## Item analysis of what make grade wrote.
report: setup
	$(GRADER) report --out $(OUT)

## The course's own tests, without the course-wide proofs (pytest.ini's marker slow): minutes, for every change.
test: setup
	$(PYTHON) -m pytest -n 2 --dist loadfile --no-loadscope-reorder -m "not slow" tests

## Every test of the course, the course-wide proofs too (what CI runs).
test-all: setup
	$(PYTHON) -m pytest -n 2 --dist loadfile --no-loadscope-reorder tests

## Final scores as Canvas's and Moodle's grade imports (canvas.csv, moodle.csv beside grades.csv).
lms: setup
	@test -n "$(ROSTER)" || { echo "usage: make lms ROSTER=roster.csv [SUBMITTED=submitted]"; exit 2; }
	$(GRADER) export-lms --out $(OUT) --roster $(ROSTER) --db $(DB)

## Push the final scores to the LMS with LTI 1.3 (docs/lms.md), only those that changed:
## make lms-push ROSTER=roster.csv [LTI=lti.yml] [ASSIGNMENT=id] [DRY_RUN=1] [FORCE=1]
lms-push: setup
	@test -n "$(ROSTER)" || { echo "usage: make lms-push ROSTER=roster.csv [LTI=lti.yml] [ASSIGNMENT=id] [DRY_RUN=1] [FORCE=1]"; exit 2; }
	$(GRADER) lms-push --config $(or $(LTI),lti.yml) --roster $(ROSTER) --out $(COURSE_OUT) --db $(COURSE_DB) \
	  $(if $(ASSIGNMENT),--assignment $(ASSIGNMENT)) $(if $(DRY_RUN),--dry-run) $(if $(FORCE),--force)

## The tool's key pair for LTI 1.3: the private key in KEY (default ~/.config/attention-course/), the JWKS printed
lms-keys: setup
	$(GRADER) lms-keys $(if $(KEY),--out $(KEY))

## solutions/ -> exercises/ with nbgrader generate_assignment (ASSIGNMENT=id for one).
release: setup
	$(GRADER) release $(if $(ASSIGNMENT),--assignment $(ASSIGNMENT))

## Rebuild the sample class from the released notebooks (after `make release`).
sample-class: setup
	$(PYTHON) -m tests.sample_class

## An exercise author's loop: grade the reference, the stub and the exercise's catalogue entries.
check: setup
	@test -n "$(EXERCISE)" || { echo "usage: make check EXERCISE=<exercise id from course.yml>"; exit 2; }
	$(PYTHON) -m tests.check $(EXERCISE)

## Scaffold a new exercise: its notebook cells, course.yml entry, suite module and catalogue module.
exercise: setup
	@test -n "$(ID)" -a -n "$(ASSIGNMENT)" -a -n "$(FUNCTION)" || { echo "usage: make exercise ID=<id> ASSIGNMENT=<assignment> FUNCTION=<name> [TITLE=...]"; exit 2; }
	$(GRADER) new-exercise $(ID) --assignment $(ASSIGNMENT) --function $(FUNCTION) $(if $(TITLE),--title "$(TITLE)")

## Grade a class of every assignment (176 notebooks, made like a real class) with nbgrader autograde and with make grade, side by side;
## then 100 students checking each assignment at once against the check server (docs/checks.md).
## Its students draw their numbers from the demo's secret, as make grade's sample class does.
bench: export COURSE_VARIANT_SECRET := $(HOME)/.cache/attention-course/demo-variant-secret
bench: setup
	@$(GRADER) variant-secret --if-missing --out $(OUT) >/dev/null
	$(PYTHON) -m tests.bench
	$(PYTHON) -m tests.bench_checks --students 100

## Kubernetes Jobs for the same shards: make k8s-manifests SHARDS=8 IMAGE=... CLAIM=<volume claim> (docs/scale.md)
k8s-manifests: setup
	@test -n "$(IMAGE)" -a -n "$(CLAIM)" || { echo "usage: make k8s-manifests SHARDS=8 IMAGE=<image> CLAIM=<PersistentVolumeClaim> [JOBS=1]"; exit 2; }
	$(GRADER) k8s-manifests --shards $(or $(SHARDS),4) --jobs $(or $(JOBS),1) --image $(IMAGE) --claim $(CLAIM) \
	  $(if $(ASSIGNMENT),--assignment $(ASSIGNMENT)) $(if $(STUDENT),--student '$(STUDENT)')

## Combine the output folders of `make grade SHARD=K/N OUT=...` runs: make merge SHARDS="a b" [OUT=grading]
## (into the course's gradebook.db unless DB=... is given, never the sample class's)
merge: setup
	@test -n "$(SHARDS)" || { echo 'usage: make merge SHARDS="<folder of shard 1> ... <folder of shard N>" [OUT=grading] [DB=...]'; exit 2; }
	$(GRADER) merge $(SHARDS) --out $(COURSE_OUT) --db $(COURSE_DB)

## Grade on a Slurm cluster, from its login node: an array job of SHARDS shards, JOBS processes each,
## then a merge that waits for them (WAIT=1 waits and prints how it ended; docs/scale.md).
grade-slurm: setup
	$(GRADER) grade-slurm --submitted $(SUBMITTED) --out $(OUT) --db $(DB) --shards $(or $(SHARDS),4) \
	  --jobs $(or $(JOBS),1) $(SLURM_ARGS)

## What students receive: student-kit/ and student-kit.zip, the assignments released so far
## (course.yml's schedule; AT=2026-10-06T00:00:00Z shows the kit of that day); STUDENT=id: that
## student's own kit, with their numbers, in student-kit-<id>/ and student-kit-<id>.zip.
student-kit: setup
	$(GRADER) student-kit --out student-kit $(if $(AT),--at $(AT)) $(if $(STUDENT),--student '$(STUDENT)')

## Each student's numbers of the assignments with variants: variants/<student>/<assignment>/variant.json,
## for ROSTER=roster.csv's students or the class under SUBMITTED (ASSIGNMENT=id; default: those released).
variants: setup
	$(GRADER) variants --out $(or $(VARIANTS),variants) $(if $(ROSTER),--roster $(ROSTER),--submitted $(SUBMITTED)) \
	  $(if $(ASSIGNMENT),--assignment $(ASSIGNMENT))

## The course's variant secret (once; refused once grades exist or students' numbers left this machine:
## FORCE=1 replaces it anyway, and every student's numbers change).
variant-secret: $(VENV)/.installed
	$(GRADER) variant-secret $(if $(FORCE),--force)

## Gradescope's autograder.zip for one assignment: make gradescope ASSIGNMENT=masks
gradescope: setup
	$(GRADER) gradescope-zip --assignment $(ASSIGNMENT) --out autograder.zip

## Grading on push (.github/workflows/grade-push.yml): fetch the class's repositories that moved
## into SUBMITTED, then, after make grade, answer each new commit. Needs COURSE_GITHUB_TOKEN.
push-collect: setup
	$(GRADER) collect-push --submitted $(SUBMITTED) $(if $(SHARD),--shard $(SHARD))

push-post: setup
	$(GRADER) post-push --submitted $(SUBMITTED) --out $(OUT)

## The course on a local JupyterHub (docs/jupyterhub.md; as root, until Ctrl-C): an instructor with formgrader, ROSTER=
## roster.csv's students (two demo students without it), the check service; PORT=8000, STATE=/srv/attention-hub, PASSWORD=.
hub: setup
	@command -v npm >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  apt-get install -y -qq nodejs npm >/dev/null 2>&1; } || { echo "make hub needs Node and npm (Debian: nodejs npm)"; exit 2; }
	@test -x autograder/hub/proxy/node_modules/.bin/configurable-http-proxy || \
	  (cd autograder/hub/proxy && npm ci --no-audit --no-fund)
	$(PYTHON) -m autograder.hub --release --state $(or $(STATE),/srv/attention-hub) --port $(or $(PORT),8000) $(if $(ROSTER),--roster $(ROSTER)) \
	  $(if $(PASSWORD),--password $(PASSWORD))

## Remove what the sample-class demo wrote (never the course's own grading/ or gradebook.db).
clean-demo:
	rm -rf sample_class/graded sample_class/gradebook.db
