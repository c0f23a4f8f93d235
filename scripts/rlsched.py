"""Helpers for training scripts started by rlsched.

The worker puts the directory holding this file on PYTHONPATH, so a run can
``import rlsched`` and report to the scheduler:

    import rlsched
    rlsched.metric(12, episode_reward=187.5)  # RLSCHED_METRIC {"step": 12, "episode_reward": 187.5}
    rlsched.final_reward(195.2)                # FINAL_REWARD:195.2
    out = rlsched.output_dir()                 # $RLSCHED_OUTPUT_DIR or ./outputs, created
    cfg = rlsched.params()                     # json.loads($RLSCHED_PARAMS) or {}

Only the standard library is used.
"""

import json
import os
import sys

__all__ = ["metric", "final_reward", "output_dir", "params"]

METRIC_PREFIX = "RLSCHED_METRIC "
FINAL_PREFIX = "FINAL_REWARD:"


def metric(step, **values):
    """Print one metric line: ``RLSCHED_METRIC {"step": step, **values}``."""
    record = {"step": step}
    record.update(values)
    print(METRIC_PREFIX + json.dumps(record), flush=True)


def final_reward(x):
    """Print the run's final reward as ``FINAL_REWARD:x``."""
    print(FINAL_PREFIX + str(x), flush=True)


def output_dir():
    """Return $RLSCHED_OUTPUT_DIR (or ./outputs when unset or empty), creating it."""
    path = os.environ.get("RLSCHED_OUTPUT_DIR") or "./outputs"
    os.makedirs(path, exist_ok=True)
    return path


def params():
    """Return the run's parameters: json.loads($RLSCHED_PARAMS), or {} when unset.

    A value that is not valid JSON, or not a JSON object, gives {} and a note on stderr.
    """
    raw = os.environ.get("RLSCHED_PARAMS", "")
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError as exc:
        print("rlsched: ignoring RLSCHED_PARAMS, not valid JSON: %s" % exc, file=sys.stderr, flush=True)
        return {}
    if not isinstance(value, dict):
        print("rlsched: ignoring RLSCHED_PARAMS, not a JSON object", file=sys.stderr, flush=True)
        return {}
    return value
