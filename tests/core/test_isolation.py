"""Tests run in a throwaway home: nothing reads or writes the real user's Klaw dirs."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import REAL_HOME, TEST_ROOT
from klaw.paths import KlawPaths


def test_session_environment_points_away_from_the_real_home() -> None:
    paths = KlawPaths.from_env()
    for d in (paths.config_dir, paths.data_dir, paths.state_dir, paths.workspace):
        assert d.is_relative_to(TEST_ROOT), d
    assert Path.home().is_relative_to(TEST_ROOT)
    assert not str(paths.cache_dir).startswith(os.path.join(REAL_HOME, ".cache"))


def test_each_test_home_is_its_own(klaw_home: KlawPaths, tmp_path: Path) -> None:
    for d in (klaw_home.config_dir, klaw_home.data_dir, klaw_home.state_dir, klaw_home.workspace):
        assert d.is_relative_to(tmp_path), d
