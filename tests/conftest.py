"""Every test runs in its own empty working directory, so files in the repository root (say a
``results.json`` left by README's main job) can never change a test's outcome, and no test
leaves files behind there."""

import pytest


@pytest.fixture(autouse=True)
def _own_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
