"""What a user installs works: the sdist and the wheel, built here, installed with no extras.

The rest of the suite runs django_jobs from this checkout, in a virtualenv that
also holds every dev and test tool, so it cannot see a module that imports one
of them at run time (``django_stubs_ext`` once broke every user's admin that
way). These tests build the artefacts as a release would, check that they carry
every file of the package, install each into a fresh virtualenv with nothing
but what django-jobs declares, import every module there, and run ``check``
and ``migrate`` of a project that mounts the admin and the API.

They need pip to reach the package index (or its cache), like any install.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import venv
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import MINIMAL_PROJECT, ROOT

Run = Callable[..., subprocess.CompletedProcess[str]]

# Files of the release besides the package: the sdist carries them all, the
# wheel its licence.
SDIST_EXTRAS = {"LICENSE", "README.md", "CHANGELOG.md", "pyproject.toml"}


def package_files() -> set[str]:
    """Every file of the checkout's django_jobs package that a release must carry."""
    return {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "django_jobs").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


@pytest.fixture(scope="module")
def artefacts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sdist, and the wheel built from it, as ``python -m build`` makes a release."""
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return {"sdist": sdist, "wheel": wheel}


def test_sdist__carries_the_whole_package_the_licence_and_no_half_test_suite(
    artefacts: dict[str, Path],
) -> None:
    with tarfile.open(artefacts["sdist"]) as sdist:
        members = [m for m in sdist.getmembers() if "/" in m.name]
    names = {m.name.split("/", 1)[1] for m in members}
    files = {m.name.split("/", 1)[1] for m in members if m.isfile()}

    assert {f for f in files if f.startswith("django_jobs/")} == package_files()
    assert files >= SDIST_EXTRAS
    assert not any(name.startswith("tests/") for name in names)


def test_wheel__carries_the_whole_package_and_the_licence(artefacts: dict[str, Path]) -> None:
    with zipfile.ZipFile(artefacts["wheel"]) as wheel:
        names = set(wheel.namelist())

    assert {n for n in names if n.startswith("django_jobs/")} == package_files()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)


@pytest.mark.parametrize("kind", ["wheel", "sdist"])
def test_install_without_extras__imports_every_module_checks_and_migrates(
    artefacts: dict[str, Path], tmp_path: Path, minimal_project: Run, kind: str
) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    # Without PYTHONPATH: pointing at a checkout (with a build's egg-info in
    # it), it makes pip believe the package is installed and skip the artefact.
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", str(artefacts[kind])],
        check=True,
        capture_output=True,
        env=clean,
    )

    imported = subprocess.run(
        [str(python), "import_every_module.py"],
        cwd=MINIMAL_PROJECT,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "MINIMAL_DB": str(tmp_path / "db.sqlite3")},
        timeout=120,
    )
    checked = minimal_project("check", python=python)
    migrated = minimal_project("migrate", "--noinput", python=python)

    assert imported.returncode == 0, imported.stdout + imported.stderr
    assert f"modules from {env_dir}/lib/" in imported.stdout, imported.stdout
    assert (checked.returncode, checked.stdout.strip()) == (
        0,
        "System check identified no issues (0 silenced).",
    ), checked.stderr
    assert migrated.returncode == 0, migrated.stderr
    assert "Applying django_jobs.0001_initial... OK" in migrated.stdout
