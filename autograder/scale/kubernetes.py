"""Kubernetes manifests for grading on a campus cluster (JupyterHub's, say): the same shards as Slurm's.

    an Indexed Job       completions = parallelism-limited N pods; pod i grades shard i+1 of N
                         (JOB_COMPLETION_INDEX) into <course>/grading/shards/shard-<i+1>
    a NetworkPolicy      no traffic in or out of the grading pods
    a merge Job          merges the N shard folders into grading/ and the course's gradebook, in a file
                         of its own, applied once the first has completed (kubectl wait), as
                         Kubernetes has no dependencies between Jobs

Every pod mounts the course checkout (with its .venv and the submissions) from one shared volume
claim and an empty /tmp (its HOME: the grader's cache), and is held to what a cluster's admission
policies look for: a user that is not root (a high UID), a read-only root filesystem, no privilege
escalation, every capability dropped, no service-account token, requests equal to limits, the image
pulled every time.  The grading pods' seccomp and AppArmor profiles are Unconfined: bubblewrap makes
the student's sandbox from unprivileged user namespaces and mounts in them, which the container
runtime's default profiles refuse (it loads its own seccomp filter for the student's code); the merge
pod runs nothing of a student's and keeps the runtime's default seccomp profile (docs/scale.md).
Kubernetes does the scheduling, retries (backoffLimitPerIndex) and bookkeeping; the shard folders say
which finished.
"""

import shlex
from pathlib import Path

import yaml

LABEL = "autograder.grading"
# The Kubernetes versions the manifests are written for (backoffLimitPerIndex is GA from 1.33), each
# checked against its own schemas in the tests
SUPPORTED = ("1.33", "1.34", "1.35", "1.36", "1.37")
SCRATCH = "2Gi"    # the pod's /tmp (and HOME): the grader's temporary files and cache


def _pod(name, command, *, image, claim, mount, user, cpus, memory, sandbox):
    """A pod's template; `sandbox`: it grades, so bubblewrap needs namespaces and mounts of its own."""
    unconfined = {"type": "Unconfined"}
    return {
        "metadata": {"labels": {LABEL: name}},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": {"runAsNonRoot": True, "runAsUser": user, "runAsGroup": user, "fsGroup": user,
                                "seccompProfile": unconfined if sandbox else {"type": "RuntimeDefault"},
                                **({"appArmorProfile": unconfined} if sandbox else {})},
            "containers": [{
                "name": "grade",
                "image": image,
                "imagePullPolicy": "Always",
                "workingDir": mount,
                "command": ["/bin/sh", "-c", command],
                "env": [{"name": "HOME", "value": "/tmp"}],
                "resources": {"requests": {"cpu": str(cpus), "memory": memory},
                              "limits": {"cpu": str(cpus), "memory": memory}},
                "securityContext": {"runAsNonRoot": True, "privileged": False, "allowPrivilegeEscalation": False,
                                    "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}},
                "volumeMounts": [{"name": "course", "mountPath": mount}, {"name": "tmp", "mountPath": "/tmp"}],
            }],
            "volumes": [{"name": "course", "persistentVolumeClaim": {"claimName": claim}},
                        {"name": "tmp", "emptyDir": {"sizeLimit": SCRATCH}}],
        },
    }


def manifests(*, name, shards, image, claim, parallelism=None, jobs=1, memory="6Gi", user=10001,
              mount="/course", submitted="submitted", out="grading", retries=2, selection=(), gradebook="gradebook.db",
              autograded="autograded"):
    """([the Indexed Job, the NetworkPolicy], [the merge Job]): two lists of Kubernetes objects, applied
    one after the other.  Paths
    are relative to the course checkout at `mount` (the pods' working directory): the gradebook is
    the course's own gradebook.db and autograded/ unless `gradebook` and `autograded` say otherwise.  selection: grade-class's --assignment/--student options."""
    python = f"{mount}/.venv/bin/python -m autograder"
    shard = f'{out}/shards/shard-$((JOB_COMPLETION_INDEX + 1))'
    grade = (f'{python} grade-class --no-service --submitted {submitted} --jobs {jobs} {shlex.join(selection)} --out "{shard}" '
             f'--db "sqlite:///{shard}/gradebook.db" --autograded "{shard}/autograded" '
             f'--shard "$((JOB_COMPLETION_INDEX + 1))/{shards}"')
    folders = " ".join(f"{out}/shards/shard-{k}" for k in range(1, shards + 1))
    merge = f"{python} merge {folders} --out {out} --db sqlite:///{gradebook} --autograded {autograded}"
    common = dict(image=image, claim=claim, mount=mount, user=user)
    shards_job = {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": {LABEL: name}},
        "spec": {"completionMode": "Indexed", "completions": shards, "parallelism": parallelism or shards,
                 "backoffLimitPerIndex": retries, "maxFailedIndexes": shards,
                 "template": _pod(name, grade, cpus=jobs, memory=memory, sandbox=True, **common)}}
    no_network = {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": f"{name}-no-network", "labels": {LABEL: name}},
        "spec": {"podSelector": {"matchLabels": {LABEL: name}}, "policyTypes": ["Ingress", "Egress"],
                 "ingress": [], "egress": []}}
    merge_job = {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": f"{name}-merge", "labels": {LABEL: name}},
        "spec": {"completions": 1, "backoffLimit": retries,
                 "template": _pod(name, merge, cpus=1, memory="2Gi", sandbox=False, **common)}}
    return [shards_job, no_network], [merge_job]


def to_yaml(objects):
    return yaml.safe_dump_all(objects, sort_keys=False)


def write(shards, merge, output):
    """The shards' objects into `output`, the merge's beside it (<stem>-merge<suffix>); both paths."""
    first = Path(output)
    second = first.with_name(f"{first.stem}-merge{first.suffix}")
    first.write_text(to_yaml(shards))
    second.write_text(to_yaml(merge))
    return first, second
