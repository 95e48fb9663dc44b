import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Every benchmark target of the run: met, or a FAILED line (and a failing exit status)."""
    from targets import RESULTS
    if not RESULTS:
        return
    missed = [r for r in RESULTS if not r[4]]
    tr = terminalreporter
    tr.section("benchmark targets")
    for bench, what, value, target, ok in RESULTS:
        tr.line(f"{'met   ' if ok else 'FAILED'} [{bench}] {what}: {value:.4g} (target {target})")
    tr.line(f"{len(RESULTS) - len(missed)} of {len(RESULTS)} targets met" +
            (f"; FAILED: {len(missed)} missed" if missed else ""))


def pytest_sessionfinish(session, exitstatus):
    from targets import RESULTS
    if any(not r[4] for r in RESULTS) and session.exitstatus == 0:
        session.exitstatus = 1
