"""fuzz/: a bounded smoke run of every atheris harness (issue 7).

Each target runs as its own process, as `python fuzz/fuzz_<target>.py` is run by hand: its
seed corpus first (every seed must keep its harness's contract), then a fixed number of
mutated inputs with a fixed seed, so the run is short and repeatable. Exit status 0 means
no contract broke. The long runs and their figures are in docs/security.md.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import need_module

ROOT = Path(__file__).resolve().parent.parent
FUZZ = ROOT / "fuzz"
# Target -> mutated inputs after the seeds: about a second of fuzzing each on this machine
# (the chunked harness signs and decodes whole bodies, so it runs ~700 inputs a second).
RUNS = {"ranges": 3000, "chunked": 500, "xml": 3000, "auth": 2000, "request": 3000, "events": 3000,
        "config": 3000, "peers": 3000, "form": 3000}


def test_every_harness_is_smoke_tested() -> None:
    assert sorted(p.stem.removeprefix("fuzz_") for p in FUZZ.glob("fuzz_*.py")) == sorted(RUNS)
    for target in RUNS:
        assert any((FUZZ / "corpus" / target).iterdir()), f"no seed corpus for {target}"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("target", sorted(RUNS))
def test_harness_runs_clean(target: str, tmp_path: Path) -> None:
    need_module("atheris", "pip install atheris (in the test extra on Linux x86_64; it has no other wheels)")
    new_inputs = tmp_path / "corpus"
    new_inputs.mkdir()
    command = [sys.executable, str(FUZZ / f"fuzz_{target}.py"), f"-runs={RUNS[target]}", "-seed=1",
               "-max_total_time=20", "-timeout=10", f"-artifact_prefix={tmp_path}/",
               str(new_inputs), str(FUZZ / "corpus" / target)]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=50)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"fuzz_{target} failed (exit {done.returncode}):\n{output[-4000:]}"
    assert "INITED" in output and "Done " in output, output[-2000:]
