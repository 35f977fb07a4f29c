#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder image (in /autograder/source).
# It installs the course's pinned dependencies with the image's own Python (3.10 or newer: Ubuntu
# 22.04 ships 3.10, 24.04 ships 3.12) and bubblewrap, which sandboxes student code, and then grades
# the reference solution in that sandbox: an image where the sandbox cannot start, or where the
# solution does not get full marks, fails to build here, with the reason, instead of giving every
# student a 0 later.
set -euo pipefail
cd "$(dirname "$0")"
root="${AUTOGRADER_ROOT:-/autograder}"
export DEBIAN_FRONTEND=noninteractive

fail() { echo "setup.sh: $*" >&2; exit 1; }

apt-get update -qq
apt-get install -y -qq python3 python3-venv bubblewrap util-linux >/dev/null
python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' ||
  fail "this image's python3 is $(python3 -V 2>&1); the grader needs Python 3.10 or newer (choose Ubuntu 22.04 or later)"
version="$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
# pythons.txt (written by `make gradescope`): the Pythons on which this assignment's packages install.
if [ -s pythons.txt ] && ! grep -qw -- "$version" pythons.txt; then
  fail "$(sed 's/;.*//' packages.txt | paste -sd ' ') has no build for this image's Python $version: choose an image with Python $(sed 's/ / or /g' pythons.txt) (Debian 12: 3.11, Ubuntu 24.04: 3.12)"
fi
# The sandbox's first step, before minutes of installing: user namespaces must be allowed here.
if ! reason="$(bwrap --unshare-all --ro-bind / / true 2>&1)"; then
  fail "the grader cannot run on this image: the sandbox (bubblewrap) cannot start: $(echo "$reason" | tail -n 1)"
fi

if [ ! -x "$root/venv/bin/python" ]; then
  python3 -m venv "$root/venv"
  "$root/venv/bin/python" -m pip install --quiet --upgrade pip
fi
# torch-index.txt (written by `make gradescope` from course.yml's gradescope.torch_index_url) names
# the index of PyTorch's CPU-only wheels; without it pip takes the default build of torch.
index=()
if [ -s torch-index.txt ]; then index=(--extra-index-url "$(cat torch-index.txt)"); fi
# One lock per Python of Gradescope's images (python -m tests.gradescope_locks writes them).
[ -f "requirements-$version.txt" ] ||
  fail "no package lock for Python $version here (requirements-3.10/3.11/3.12.txt): choose Ubuntu 22.04, Debian 12 or Ubuntu 24.04"
"$root/venv/bin/python" -m pip install --quiet "${index[@]}" -r "requirements-$version.txt"
# packages.txt: what this assignment adds (course.yml's packages, e.g. Triton for the kernel track).
if [ -s packages.txt ]; then
  "$root/venv/bin/python" -m pip install --quiet -r packages.txt
fi

# The build's own test: the reference solution, graded in the sandbox as a submission would be; where
# the assignment has each student's own numbers, as the first student of the roster the zip carries.
assignment="$(cat assignment.txt)"
student=student
if [ -s variant-key.json ]; then
  student="$("$root/venv/bin/python" -c 'import json; print(min(json.load(open("variant-key.json"))["students"]))')" ||
    fail "variant-key.json carries no roster: build the zip again after make variants ROSTER=roster.csv"
fi
for solution in solutions/"$assignment"/*.ipynb; do
  if ! report="$("$root/venv/bin/python" -m autograder grade --assignment "$assignment" --student "$student" "$solution" 2>&1)"; then
    fail "the grader cannot run on this image: $(echo "$report" | tail -n 1)"
  fi
  score="$(echo "$report" | tail -n 1)"
  case "$score" in
    "error:"*|"grader fault"*|*"not graded"*|*"could not"*) fail "the grader cannot run on this image: $score" ;;
  esac
  read -r got _ possible _ <<<"$score"
  [ "$got" = "$possible" ] || fail "the reference solution $solution gets $score in this image, not full marks"
  echo "setup.sh: the sandbox works here: $solution gets $score"
done
