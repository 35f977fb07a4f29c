"""Pictures in the feedback: the student's attention weights beside the pattern the rule requires.

A check that finds weight where the rule allows none (a mask, causality) attaches a `Picture`
built from the student's own output and the rule, never from hidden expected values.  It is kept
as plain numbers in grade.json and drawn when the feedback is written: as a PNG in the HTML
feedback (feedback.html) and in nbgrader's autograded notebook, so `generate_feedback` shows it.
"""

import base64
import functools
import hashlib
import io
import json
from dataclasses import asdict, dataclass
from importlib import metadata

from autograder.files import cached

MAX_SIDE = 64  # larger maps are cropped to their top-left corner: the picture is for reading


@dataclass
class Picture:
    title: str
    weights: list   # [queries][keys] floats: the student's weights
    allowed: list   # [queries][keys] bools: True where the rule allows a non-zero weight
    rows: str = "query position"
    columns: str = "key position"
    yours: str = "your attention weights"

    @classmethod
    def of(cls, title, weights, allowed, **labels):
        """From 2-D tensors (or arrays) of weights and of allowed positions; labels: rows, columns,
        yours (what the left panel shows)."""
        weights, allowed = weights[:MAX_SIDE, :MAX_SIDE], allowed[:MAX_SIDE, :MAX_SIDE]
        return cls(title, [[float(v) for v in row] for row in weights.tolist()],
                   [[bool(v) for v in row] for row in allowed.tolist()], **labels)

    def to_dict(self):
        return asdict(self)

    @classmethod
    def from_dict(cls, data):
        return None if not data else cls(**data)


def png(picture):
    """The picture as PNG bytes: the weights (with a colour bar; a 0/1 mask in the rule's colours) and
    the rule, side by side."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    weights = np.array(picture.weights, dtype=float)
    allowed = np.array(picture.allowed, dtype=bool)
    leaks = (~allowed) & (weights != 0)
    rows, columns = weights.shape
    size = (8.6, 3.6 + 0.08 * max(0, rows - 8))
    figure, (left, right) = plt.subplots(1, 2, figsize=size, constrained_layout=True)
    if np.isin(weights, (0.0, 1.0)).all():   # a mask: drawn as the rule is (white: may attend)
        left.imshow(weights, cmap="Greys_r", vmin=0, vmax=1)
        left.set_title(f"{picture.yours} (white: may attend)")
    else:
        image = left.imshow(weights, cmap="viridis", vmin=min(0.0, float(np.nanmin(weights))),
                            vmax=max(1.0, float(np.nanmax(weights))))
        figure.colorbar(image, ax=left)
        left.set_title(picture.yours)
    right.imshow(allowed, cmap="Greys_r", vmin=0, vmax=1)
    right.set_title("the rule (white: may attend)")
    where = np.argwhere(leaks)
    if len(where):
        right.scatter(where[:, 1], where[:, 0], marker="x", color="red", s=30,
                      label=f"{len(where)} blocked position(s) with weight")
        right.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), fontsize=8, frameon=False)
    step_r, step_c = max(1, rows // 10), max(1, columns // 10)
    for axis in (left, right):
        axis.set_xlabel(picture.columns)
        axis.set_ylabel(picture.rows)
        axis.set_xticks(range(0, columns, step_c))
        axis.set_yticks(range(0, rows, step_r))
    figure.suptitle(picture.title, fontsize=10)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90)
    plt.close(figure)
    return buffer.getvalue()


def png_base64(picture):
    """The PNG as base64 text.  Each picture is drawn once (about 0.4 s of matplotlib in a process's
    first, 0.1 s after) and kept in the grader's cache folder (files.cache_folder) by a hash of what it
    shows and of matplotlib's version: a graded submission's picture goes into its feedback page,
    written by the grading process, and into nbgrader's autograded notebook, written by the process
    that runs the class, and again at every regrade."""
    return _png_base64(json.dumps(picture.to_dict(), sort_keys=True))


@functools.lru_cache(maxsize=64)
def _png_base64(picture_json):
    key = hashlib.sha256(f"{metadata.version('matplotlib')}\0{picture_json}".encode()).hexdigest()[:32]
    drawn = cached("pictures", f"{key}.png", lambda: png(Picture.from_dict(json.loads(picture_json))), _not_empty)
    return base64.b64encode(drawn).decode("ascii")


def _not_empty(data):
    """A kept picture as it was read; an empty file is drawn again (files.cached)."""
    if not data:
        raise ValueError("an empty picture file")
    return data
