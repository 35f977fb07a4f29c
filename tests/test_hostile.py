"""Hostile submissions: each attack must not raise a score, must change nothing outside its scratch
space, and must leave the grader able to grade the next submission.

Part one probes the sandbox directly (what a submission's process can and cannot do).  Part two
grades a class of attacks with `grade-class --jobs 1`, so one warm worker sees every attack in
turn; after each attack a canary (the reference solution) must still get full marks.
"""

import csv
import hashlib
import itertools
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from autograder import variants
from autograder.harness.context import Student
from autograder.sandbox.student import Cell, Limits, StudentProcess, Worker
from tests.notebooks import COURSE, ROOT, make_submission, solution_answers

SECRET = "grader-secret-7f3a9c"   # in the grader's environment; must never reach a student's output


def tree_digest(*folders):
    digest = hashlib.sha256()
    for folder in folders:
        for path in sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            digest.update(str(path).encode() + path.read_bytes())
    return digest.hexdigest()


# -- part one: what the process may do ---------------------------------------------------------

PROBE = r'''
import ctypes, errno, os, signal, socket, subprocess
libc = ctypes.CDLL(None, use_errno=True)

def attempt(action):
    try:
        result = action()
        return "allowed" if result in (None, 0) or not isinstance(result, int) or result >= 0 else \
            f"refused ({errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno())})"
    except BaseException as error:
        return f"refused ({type(error).__name__})"

def write(path):
    with open(path, "w") as handle:
        handle.write("pwned")

def read(path):
    with open(path) as handle:
        return handle.read()

def probe():
    MS_REMOUNT, MS_BIND = 32, 4096
    results = {
        "remount /sandbox rw": attempt(lambda: libc.mount(None, b"/sandbox", None, MS_REMOUNT | MS_BIND, None)),
        "mount a tmpfs": attempt(lambda: libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)),
        "write into /sandbox": attempt(lambda: write("/sandbox/pwned.py")),
        "write into the venv": attempt(lambda: write(os.path.join(os.path.dirname(os.__file__), "pwned.py"))),
        "symlink out of scratch": attempt(lambda: (os.symlink("/sandbox/worker.py", "link"), write("link"))),
        "read /etc/shadow": attempt(lambda: read("/etc/shadow")),
        "read the variant secret": attempt(lambda: read(VARIANT_SECRET)),
        "read the instructor's default variant secret": attempt(lambda: read(DEFAULT_SECRET)),
        "read the grader's environment": attempt(leak_environment),
        "read the worker's memory": attempt(lambda: read(f"/proc/{os.getppid()}/mem")),
        "ptrace the worker": attempt(lambda: libc.ptrace(16, os.getppid(), None, None)),
        "signal the worker": attempt(lambda: os.kill(os.getppid(), signal.SIGKILL)),
        "signal every process": attempt(lambda: os.kill(-1, signal.SIGKILL)),
        "fork": attempt(lambda: os.fork()),
        "run a program": attempt(lambda: subprocess.run(["/bin/true"])),
        "open a network socket": attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM)),
        "new user namespace": attempt(lambda: libc.unshare(0x10000000)),
        "fill the scratch space": attempt(lambda: write_big("big.bin", 300)),
    }
    print("x" * (50 << 20))  # a flood of output goes nowhere
    return results

def leak_environment():
    seen = "".join(read(f"/proc/{pid}/environ") for pid in os.listdir("/proc") if pid.isdigit()
                   and os.access(f"/proc/{pid}/environ", os.R_OK)) + str(os.environ)
    if "AUTOGRADER_TEST_SECRET" not in seen:
        raise PermissionError("not visible")

def write_big(path, megabytes):
    with open(path, "wb") as handle:
        for _ in range(megabytes):
            handle.write(b"\0" * (1 << 20))
'''


def test_a_submission_process_is_refused_everything_outside_its_scratch_space(monkeypatch):
    monkeypatch.setenv("AUTOGRADER_TEST_SECRET", SECRET)
    before = tree_digest(ROOT / "autograder")
    secrets = (f"VARIANT_SECRET = {str(variants.secret_path(COURSE))!r}\n"   # the secret the students' numbers come from
               f"DEFAULT_SECRET = {os.path.expanduser(variants.DEFAULT_SECRET)!r}\n")
    with Worker(Limits()) as worker:
        worker.start()
        with StudentProcess(worker, [Cell("probe", secrets + PROBE)], Limits(call_timeout=20)) as process:
            results = Student(process).call("probe")["output"]
        # The worker survived it all and serves the next submission.
        with StudentProcess(worker, [Cell("f", "def f():\n    return 42\n")], Limits()) as process:
            assert Student(process).call("f")["output"] == 42
    allowed = {action: result for action, result in results.items() if not result.startswith("refused")}
    assert allowed == {}
    assert tree_digest(ROOT / "autograder") == before
    assert not (ROOT / "autograder" / "sandbox" / "pwned.py").exists()


# -- part two: attacks graded as a class -------------------------------------------------------

CORRECT_SDPA = solution_answers("scaled_attention")["sdpa"]

FORGE = r'''
import io, json, os, stat, struct
def forge(value, raw=None, data=b""):
    """Write a framed message on every pipe this process may write to (value: the message's JSON text,
    data: the bytes its tensors name; raw: the whole payload)."""
    if raw is None:
        text = json.dumps(value).encode()
        raw = struct.pack("!I", len(text)) + text + data
    frame = struct.pack("!Q", len(raw)) + raw
    for fd in range(3, 64):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, frame)
        except OSError:
            pass
'''

ATTACKS = {
    # forged frames on the reply pipe
    "forged_event_without_index": FORGE + "forge(['dict', {'event': ['py', 'cell']}])\n" + CORRECT_SDPA,
    "forged_deep_nesting": FORGE + CORRECT_SDPA.replace(
        "def scaled_dot_product_attention(q, k, v, mask=None):",
        "def scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    nested = ['py', 0]\n    for _ in range(100):\n        nested = ['list', [nested]]\n"
        "    forge(['dict', {'ok': ['py', True], 'value': nested}])"),
    "forged_wrong_shape": FORGE + CORRECT_SDPA.replace(
        "def scaled_dot_product_attention(q, k, v, mask=None):",
        "def scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    forge(['dict', {'ok': ['py', True], 'value': ['py', 5]}])"),
    "forged_pickle_with_code": FORGE + CORRECT_SDPA.replace(
        "def scaled_dot_product_attention(q, k, v, mask=None):",
        "def scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    forge(None, raw=b\"cos\\nsystem\\n(S'touch /tmp/pwned'\\ntR.\")"),
    "forged_garbage": FORGE + CORRECT_SDPA.replace(
        "def scaled_dot_product_attention(q, k, v, mask=None):",
        "def scaled_dot_product_attention(q, k, v, mask=None):\n    forge(None, raw=os.urandom(100))"),
    "forged_expanded_tensor": FORGE + CORRECT_SDPA.replace(
        "def scaled_dot_product_attention(q, k, v, mask=None):",
        "def scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    huge = ['tensor', {'tensor': ['torch.float64', 'torch.strided', [100000, 100000], 0, 8]}]\n"
        "    forge(['dict', {'ok': ['py', True], 'value': ['dict', {'output': ['tuple', [huge, huge]],"
        " 'input_grads': ['py', None]}]}], data=bytes(8))"),
    # the shape of what comes back
    "expanded_tensor": "def scaled_dot_product_attention(q, k, v, mask=None):\n"
                       "    huge = torch.zeros(1, dtype=torch.float64).expand(100000, 100000)\n"
                       "    return huge, huge\n",
    # LONE_SURROGATE becomes the JSON escape \ud800 in the notebook file (valid JSON, not valid UTF-8)
    "lone_surrogate": "# LONE_SURROGATE a lone surrogate in the code\n"
                      "def scaled_dot_product_attention(q, k, v, mask=None):\n"
                      "    raise ValueError('\\ud800 and a lone surrogate in the message')\n",
    "unpicklable_return": "def scaled_dot_product_attention(q, k, v, mask=None):\n"
                          "    return (lambda: 1), object()\n",
    # the host
    "exfiltrate_secrets": "import os\n"
                          "def scaled_dot_product_attention(q, k, v, mask=None):\n"
                          "    found = []\n"
                          "    for path in ('/etc/shadow', '/etc/gshadow', '/proc/1/environ', '/etc/passwd'):\n"
                          "        try:\n            found.append(open(path).read())\n"
                          "        except OSError as error:\n            found.append(str(error))\n"
                          "    raise RuntimeError(' '.join(found) + ' ' + str(dict(os.environ)))\n",
    "fork_bomb": "import os\ntry:\n    while True:\n        os.fork()\nexcept OSError:\n    pass\n"
                 "def scaled_dot_product_attention(q, k, v, mask=None):\n    return None\n",
    # the from-scratch rule
    "aten_math_kernel": "def scaled_dot_product_attention(q, k, v, mask=None):\n"
                        "    out, w = torch.ops.aten._scaled_dot_product_attention_math(q, k, v, attn_mask=mask)\n"
                        "    return out, w\n",
    "builtin_then_reset_detector": CORRECT_SDPA.replace(
        "def scaled_dot_product_attention(q, k, v, mask=None):",
        "import sys\ndef scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    try:\n        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)\n"
        "    finally:\n        sys.modules['guard'].GUARD.used = False\n"),
    "builtin_grabbed_while_loading": "_attention = torch._C._nn.scaled_dot_product_attention\n"
                                     + CORRECT_SDPA.replace(
        "def scaled_dot_product_attention(q, k, v, mask=None):",
        "def scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    out = _attention(q, k, v, attn_mask=mask)"),
    "guard_destroyed_through_gc": "import gc\n"
                                  "def scaled_dot_product_attention(q, k, v, mask=None):\n"
                                  "    for obj in gc.get_objects():\n"
                                  "        if type(obj).__name__ == 'Library':\n"
                                  "            obj._destroy()\n"
                                  "    return torch.ops.aten._scaled_dot_product_attention_math(q, k, v, attn_mask=mask)\n",
    "original_behind_the_wrapper": "def scaled_dot_product_attention(q, k, v, mask=None):\n"
                                   "    wrapped = F.multi_head_attention_forward\n"
                                   "    original = [c.cell_contents for c in wrapped.__closure__ if callable(c.cell_contents)][-1]\n"
                                   "    d = q.shape[-1]\n    eye = torch.eye(d, dtype=q.dtype)\n"
                                   "    out, w = original(q.transpose(0, -2), k.transpose(0, -2), v.transpose(0, -2), d, 1,\n"
                                   "                      torch.cat([eye, eye, eye]), None, None, None, False, 0.0, eye, None,\n"
                                   "                      attn_mask=None if mask is None else ~mask)\n"
                                   "    return out.transpose(0, -2), w\n",
    "builtin_module": "def scaled_dot_product_attention(q, k, v, mask=None):\n"
                      "    d = q.shape[-1]\n    m = torch.nn.MultiheadAttention(d, 1, batch_first=True, bias=False).to(q.dtype)\n"
                      "    return m(q.reshape(-1, *q.shape[-2:]), k.reshape(-1, *k.shape[-2:]), v.reshape(-1, *v.shape[-2:]))\n",
}


TRAINING = {
    "honest_idle": "def train_model(model, inputs, targets, steps=150, lr=1e-2):\n"
                   "    losses = []\n    for _ in range(steps):\n"
                   "        logits, _ = model(inputs)\n"
                   "        losses.append(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)).item())\n"
                   "    return losses\n",
    "liar": "def train_model(model, inputs, targets, steps=150, lr=1e-2):\n"
            "    return [1.6 * 0.97 ** step for step in range(steps)]\n",
}


PEAK_OF_CHILDREN = ("import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
                    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(code)")


@pytest.fixture(scope="module")
def class_of_attacks(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    canary = solution_answers("scaled_attention")
    for name, code in ATTACKS.items():
        path = make_submission("scaled_attention", {"sdpa": code}, root / "submitted" / name / "scaled_attention")[0]
        path.write_text(path.read_text().replace("LONE_SURROGATE", "\\ud800"))
        make_submission("scaled_attention", canary, root / "submitted" / f"{name}_zcanary" / "scaled_attention")
    # A training loop that makes up its losses, and an honest one that does not train.
    answers = solution_answers("heads_at_work")
    for name, code in TRAINING.items():
        make_submission("heads_at_work", {**answers, "train_model": code}, root / "submitted" / name / "heads_at_work")
    before = tree_digest(ROOT / "autograder", ROOT / "solutions", ROOT / "exercises")
    os.environ["AUTOGRADER_TEST_SECRET"] = SECRET
    try:
        # Through a parent of its own, so that the peak is this run's, not that of an earlier test's child.
        process = subprocess.run([sys.executable, "-c", PEAK_OF_CHILDREN, sys.executable, "-m", "autograder",
                                  "grade-class", "--submitted", root / "submitted", "--out", root / "out",
                                  "--db", f"sqlite:///{root / 'gradebook.db'}", "--jobs", "1"],
                                 cwd=ROOT, capture_output=True, text=True, timeout=1200)
    finally:
        del os.environ["AUTOGRADER_TEST_SECRET"]
    assert process.returncode == 0, process.stderr
    *_, peak_kb = process.stderr.split()
    peak_mb = int(peak_kb) / 1024
    after = tree_digest(ROOT / "autograder", ROOT / "solutions", ROOT / "exercises")
    return root / "out", before == after, peak_mb, process.stdout + process.stderr


def result_of(out, student):
    return json.loads((out / "results" / student / "scaled_attention" / "results.json").read_text())


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_attack_gains_nothing_and_the_next_submission_is_graded(class_of_attacks, attack):
    out, unchanged, _, _ = class_of_attacks
    result = result_of(out, attack)
    # Every attack's own function is broken or forbidden, so no attack may score anything.
    assert result["score"] == 0, [t["name"] for t in result["tests"] if t["score"]]
    canary = result_of(out, f"{attack}_zcanary")
    assert canary["score"] == canary["max_score"] == COURSE.assignment("scaled_attention").max_score
    assert unchanged
    assert not os.path.exists("/tmp/pwned")


def test_from_scratch_evasions_are_named_in_the_feedback(class_of_attacks):
    out = class_of_attacks[0]
    for attack in ("aten_math_kernel", "builtin_then_reset_detector", "builtin_grabbed_while_loading",
                   "builtin_module", "guard_destroyed_through_gc", "original_behind_the_wrapper"):
        outputs = {test["output"] for test in result_of(out, attack)["tests"]}
        assert any("built-in attention" in output for output in outputs), (attack, outputs)


def test_code_that_reaches_into_torch_internals_or_the_guard_is_flagged_to_the_instructor(class_of_attacks):
    """Read on the trusted side, where the student's process cannot switch the reading off."""
    out = class_of_attacks[0]
    with open(out / "grades.csv") as handle:
        flags = {row["student"]: row["flags"] for row in csv.DictReader(handle)}
    assert "imports gc" in flags["guard_destroyed_through_gc"]
    assert "closure" in flags["original_behind_the_wrapper"]
    assert "_scaled_dot_product_attention_math" in flags["aten_math_kernel"]  # torch.ops.aten's private kernel
    assert "GUARD" in flags["builtin_then_reset_detector"]
    assert not flags["builtin_module"] and not flags["aten_math_kernel_zcanary"]


def test_no_host_secret_reaches_any_output(class_of_attacks):
    out, _, _, log = class_of_attacks
    texts = [path.read_text(errors="replace") for path in out.rglob("*") if path.is_file()
             and path.suffix in (".json", ".md", ".csv", ".log")]
    everything = "\n".join(texts) + log
    assert SECRET not in everything
    assert "root:" not in everything  # no line of an account database


@pytest.mark.parametrize("attack", ["forged_deep_nesting", "forged_wrong_shape", "forged_expanded_tensor",
                                    "forged_garbage", "forged_pickle_with_code"])
def test_forged_and_oversized_replies_are_charged_to_the_submission(class_of_attacks, attack):
    """A frame the submission writes on the pipes itself earns nothing: it lacks the request's nonce
    (tests/test_trust.py), and the code that writes it reaches for descriptors, which the reading of the
    code flags before anything of it counts (it imports io and os)."""
    result = result_of(class_of_attacks[0], attack)
    outputs = " ".join(test["output"] for test in result["tests"])
    assert result["score"] == 0 and "imports io" in outputs and "Your instructor has been told" in outputs


def test_the_grader_never_holds_an_amplified_reply(class_of_attacks):
    _, _, peak_mb, _ = class_of_attacks
    assert peak_mb < 3000  # a single expanded tensor touched would be 80 GB


def test_reported_losses_are_checked_against_the_returned_model(class_of_attacks):
    out = class_of_attacks[0]

    def train_model_score(student):
        result = json.loads((out / "results" / student / "heads_at_work" / "results.json").read_text())
        return sum(t["score"] for t in result["tests"] if t["name"].startswith("train_model"))
    # Neither trains: each earns only "one float per step"; the liar's invented, falling losses are
    # not believed, so lying gains nothing over the honest idle loop.
    assert train_model_score("liar") == train_model_score("honest_idle") == 1


# -- whose fault an error inside the grader is: decided by the course's own answers, not by a type -------

READS_A_ROW = '''
def test_reads_the_fourth_element(student):
    row = student.call("f")["output"]
    if row[3] != 3:          # the grader's own code indexes the reply: an IndexError here is someone's
        from autograder.harness.checks import Feedback
        raise Feedback("The fourth element is not 3.")
'''


SUITES = itertools.count()


class Replying:
    """A student as the suites see it, answering every call with `output` (or raising `error`); its process
    notes in `events` when it is closed."""
    exercise = None

    def __init__(self, output=None, error=None, events=None):
        self.output, self.error, self.events = output, error, events if events is not None else []
        self.process = type("Process", (), {"close": lambda process: self.events.append("closed")})()

    def call(self, name, *args, **kwargs):
        if self.error is not None:
            raise self.error
        return {"output": self.output}


def outcome_of(tmp_path, student, answers):
    from autograder.course import Exercise
    from autograder.harness.plugin import with_suites
    suite = tmp_path / f"test_row_{next(SUITES)}.py"   # a module name of its own: pytest imports each once
    suite.write_text(READS_A_ROW)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    exercise = Exercise("row", "row", suite, {"test_reads_the_fourth_element": 1})
    started = []

    def course_answers():
        started.append(answers)
        student.events.append("course answers started")
        return answers
    session = {}

    def body(suites):
        session["outcomes"] = suites.run([exercise], student, {}, course_answers if answers else None)
        session["internal"], session["charged"] = list(suites.internal_errors), list(suites.charged)
    with_suites([exercise], body)
    (outcome,) = session["outcomes"].values()
    return outcome, session, started


@pytest.mark.parametrize("error", ["AssertionError", "AttributeError", "RuntimeError", "WorkerError", "Feedback"])
def test_a_grader_looking_exception_raised_by_student_code_is_the_students(tmp_path, error):
    """Whatever the exception's name or traceback, an error the student's process reports is the student's
    failure: never a grader fault, and the course's answers are not even asked."""
    from autograder.sandbox.student import StudentError
    raised = StudentError(error, "internal error in autograder/harness/plugin.py",
                          'File "/sandbox/autograder/harness/plugin.py", line 1, in run\n')
    outcome, session, started = outcome_of(tmp_path, Replying(error=raised), Replying([0, 1, 2, 3]))
    assert not outcome.passed and not outcome.internal and not session["internal"] and not started
    assert "plugin.py" not in outcome.message


def test_a_reply_that_makes_the_graders_code_raise_is_the_students_when_the_course_answers_pass(tmp_path):
    """A reply of another form (a list too short to index) raises inside the grader's own code: the course's
    answers pass the same check, so the test fails (no grader fault, nothing held back), and the instructor is
    told."""
    student = Replying([0, 1])
    outcome, session, started = outcome_of(tmp_path, student, Replying([0, 1, 2, 3]))
    assert started and not outcome.passed and not outcome.internal and "not of the form" in outcome.message
    # the submission's process is gone before the course's answers run beside the sandbox's scratch space
    assert student.events == ["closed", "course answers started"]
    assert not session["internal"] and len(session["charged"]) == 1 and "IndexError" in session["charged"][0]


def test_an_error_that_the_course_answers_cause_too_is_the_graders(tmp_path):
    outcome, session, _ = outcome_of(tmp_path, Replying([0, 1]), Replying([0, 1]))
    assert outcome.internal and len(session["internal"]) == 1 and not session["charged"]
    # without the course's answers to ask, it stays the grader's, as before
    outcome, session, _ = outcome_of(tmp_path, Replying([0, 1]), None)
    assert outcome.internal and len(session["internal"]) == 1


# -- follow-through credit: never for a slip the earlier exercise is not charged for -------------------------

class Remembering:
    """The student of the hostile review's witness attack, as the suites see them: attention leaves out the
    1/sqrt(d_k) scaling and keeps its weights in its process; softmax hands them back on the next call of that
    shape, else is right (or, with wrong_axis, is wrong over the queries: a slip softmax's tests charge).  A call
    with fresh=True runs in a process that has only run the notebook's cells: nothing kept is there."""
    exercise = None

    def __init__(self, wrong_axis=False):
        self.kept, self.wrong_axis, self.fresh_calls = [], wrong_axis, 0

    @staticmethod
    def right(x, axis=-1):
        exps = np.exp(x - x.max(axis=axis, keepdims=True))
        return exps / exps.sum(axis=axis, keepdims=True)

    def call(self, name, *args, fresh=False, **kwargs):
        if fresh:
            self.kept, self.fresh_calls = [], self.fresh_calls + 1
        if name == "attention":
            q, k, v = args
            weights = self.right(q @ k.swapaxes(-1, -2))
            self.kept = [weights]
            return {"output": (weights @ v, weights)}
        x, axis = args[0], kwargs.get("axis", -1)
        if self.kept and self.kept[0].shape == x.shape:
            return {"output": self.kept.pop()}
        return {"output": self.right(x, 0 if self.wrong_axis else axis)}


def test_follow_through_credit_needs_a_wrong_earlier_function_seen_in_a_fresh_process():
    from autograder.harness import checks
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((5, 4)) for _ in range(3))

    def on_functions(functions):   # the grader's attention with the student's softmax in its place
        weights = functions["softmax"](q @ k.T / np.sqrt(4), axis=-1)
        return weights @ v, weights
    token = checks.REFERENCE.set({"softmax": Remembering.right})
    try:
        # the attack: its softmax is right wherever it was not just handed weights, so no credit follows
        attacker = Remembering()
        answer = attacker.call("attention", q, k, v)["output"]
        assert not checks.follows_theirs(attacker, {"softmax": ("softmax",)}, answer, on_functions)
        assert attacker.fresh_calls == 1
        # a softmax really wrong on these inputs (over the queries): attention built on it keeps its credit
        slipped = Remembering(wrong_axis=True)
        weights = slipped.right(q @ k.T / np.sqrt(4), 0)
        assert checks.follows_theirs(slipped, {"softmax": ("softmax",)}, (weights @ v, weights), on_functions)
    finally:
        checks.REFERENCE.reset(token)
