"""Every number plan3d prints, unchanged: each command of scripts/update_corpus.py re-run and its
`--json` output (or, for a plan that does not fit, its stderr line) compared with the saved file
in tests/data/corpus/ exactly — parsed JSON, floats with ==, no tolerance. A change that moves
numbers on purpose regenerates the corpus with the script in the same commit."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("update_corpus", ROOT / "scripts" / "update_corpus.py")
corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus)


def test_the_corpus_holds_one_file_per_command():
    assert sorted(p.stem for p in corpus.CORPUS.glob("*.json")) == sorted(corpus.COMMANDS)
    assert len(corpus.COMMANDS) >= 25


@pytest.mark.parametrize("key", sorted(corpus.COMMANDS))
def test_output_equals_the_saved_corpus(key):
    saved = json.loads(corpus.path_of(key).read_text())
    now = corpus.record(key)
    assert now["argv"] == saved["argv"]
    assert (now["exit_code"], now["stderr"]) == (saved["exit_code"], saved["stderr"])
    assert now["output"] == saved["output"]  # json floats round-trip exactly: == is exact


def test_a_changed_number_is_caught():
    """The comparison can fail: one float nudged by one ulp differs."""
    import math

    saved = json.loads(corpus.path_of("explain-70b").read_text())
    nudged = json.loads(json.dumps(saved))
    nudged["output"]["time"]["step_s"] = math.nextafter(saved["output"]["time"]["step_s"], 1e9)
    assert nudged != saved
