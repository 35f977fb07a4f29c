#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder image (in /autograder/source).
# It installs exactly the course's pinned dependencies and bubblewrap, which sandboxes student code.
set -euo pipefail
cd "$(dirname "$0")"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq python3.11 python3.11-venv bubblewrap util-linux >/dev/null
python3.11 -m venv /autograder/venv
/autograder/venv/bin/python -m pip install --quiet --upgrade pip
# torch-index.txt (written by `make gradescope` from course.yml's gradescope.torch_index_url) names
# the index of PyTorch's CPU-only wheels; without it pip takes the default build of torch==2.13.0.
index=()
if [ -s torch-index.txt ]; then index=(--extra-index-url "$(cat torch-index.txt)"); fi
/autograder/venv/bin/python -m pip install --quiet "${index[@]}" -r requirements.txt
