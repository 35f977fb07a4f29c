"""Due dates and the late policy of course.yml, and when a submission was handed in.

    late_policy:            # course.yml, top level
      percent_per_day: 10   # per started day after the grace period
      grace_minutes: 15
      max_percent: 50

Lateness comes from nbgrader's timestamp.txt in the submission folder (what `nbgrader collect`
writes).  The same policy is nbgrader's late-submission plugin (nbgrader_form.CourseLatePolicy,
configured in nbgrader_config.py), so nbgrader's own tools apply exactly what `make grade` does.
"""

import math
from dataclasses import dataclass
from datetime import timedelta, timezone
from pathlib import Path

from autograder.intake import exists, read_file


@dataclass(frozen=True)
class LatePolicy:
    percent_per_day: float = 0.0
    grace_minutes: float = 0.0
    max_percent: float = 100.0

    def fraction(self, seconds_late):
        """The share of the score taken away for a submission this many seconds late."""
        late = seconds_late - 60 * self.grace_minutes
        if late <= 0:
            return 0.0
        return min(self.max_percent, math.ceil(late / 86400) * self.percent_per_day) / 100

    def window_closes(self, due):
        """The last moment a late hand-in still earns something (an aware datetime): the due date, the
        grace period and the started days before the penalty reaches the whole score; None where a
        late hand-in always earns something (no penalty, or max_percent under 100)."""
        if self.percent_per_day <= 0 or self.max_percent < 100:
            return None
        days = 0
        while (days + 1) * self.percent_per_day < 100:
            days += 1
        return due + timedelta(minutes=self.grace_minutes, days=days)


def submitted_at(folder):
    """When the submission in `folder` was handed in (nbgrader's timestamp.txt), or None; a
    timestamp.txt that is a link out of the folder, or no regular file, raises SubmissionError."""
    path = Path(folder) / "timestamp.txt"
    if not exists(path):
        return None
    text = read_file(path, folder, 4096).decode("utf-8", "replace").strip()
    from nbgrader.utils import parse_utc  # nbgrader costs seconds to import: only when needed
    try:
        stamp = parse_utc(text)
    except (ValueError, OverflowError):
        return None
    return stamp.replace(tzinfo=timezone.utc) if stamp.tzinfo is None else stamp


def seconds_late(due, handed_in):
    if due is None or handed_in is None:
        return 0.0
    return max(0.0, (handed_in - due).total_seconds())

