"""Write a pip constraints file that pins every direct dependency of ragidx at its floor.

Reads ``pyproject.toml``: ``[project] dependencies`` and the optional extras named on the command
line; each requirement's lower bound (``>=X`` or ``==X``) becomes ``name==X``. A requirement with
no lower bound is an error (one line naming it): a floor that is not written down cannot be tested.
``--pin name==X`` replaces a floor that cannot be installed here (torch: see ``.ci/lowest``).

    python .ci/floors.py --extra test --pin torch==2.13.0 > floors.txt
    pip install -c floors.txt -e ".[test]"
    python .ci/floors.py --extra test --pin torch==2.13.0 --check   # what is installed is the floor

Standard library only, so it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*([^;]*?)\s*(?:;.*)?$")
_FLOOR = re.compile(r"(?:>=|==|~=)\s*([0-9][A-Za-z0-9.+!-]*)")


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def floors(pyproject: Path, extras: list[str], pins: list[str]) -> list[str]:
    """``name==floor`` for every direct requirement of the project and of ``extras``, sorted by name;
    ``pins`` (``name==version``) replace the floor of the package they name."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    optional = project.get("optional-dependencies", {})
    requirements = list(project.get("dependencies", []))
    for extra in extras:
        if extra not in optional:
            raise SystemExit(f"{pyproject}: no extra {extra!r} in [project.optional-dependencies]")
        requirements += optional[extra]
    overrides: dict[str, str] = {}
    for pin in pins:
        name, _, version = pin.partition("==")
        if not version:
            raise SystemExit(f"--pin {pin}: write it as name==version")
        overrides[_normal(name)] = version.strip()
    found: dict[str, str] = {}
    for requirement in requirements:
        match = _REQUIREMENT.match(requirement)
        if match is None:
            raise SystemExit(f"{pyproject}: cannot read the requirement {requirement!r}")
        name, specifier = _normal(match.group(1)), match.group(2)
        floor = overrides.get(name) or next(iter(_FLOOR.findall(specifier)), None)
        if floor is None:
            raise SystemExit(f"{pyproject}: {requirement!r} has no lower bound; give it one (>=X)")
        if found.setdefault(name, floor) != floor:
            # the same package in two places (e.g. matplotlib in two extras): the higher floor holds
            found[name] = max(found[name], floor, key=_version_key)
    return [f"{name}=={version}" for name, version in sorted(found.items())]


def _version_key(version: str) -> tuple[int, ...]:
    """``2.13.0+cpu`` → ``(2, 13)``: the release numbers, the local label and trailing zeros dropped."""
    parts = [int(part) for part in re.findall(r"\d+", version.partition("+")[0])]
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def check(pinned: list[str]) -> list[str]:
    """One line for each ``name==version`` of ``pinned`` that is not what this environment has."""
    problems = []
    for line in pinned:
        name, _, version = line.partition("==")
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            problems.append(f"{name}: not installed (its floor is {version})")
            continue
        if _version_key(installed) != _version_key(version):
            problems.append(f"{name}: {installed} installed, but its floor is {version}")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--pyproject", type=Path, default=Path(__file__).resolve().parent.parent / "pyproject.toml"
    )
    parser.add_argument("--extra", action="append", default=[], help="also pin this extra's requirements")
    parser.add_argument("--pin", action="append", default=[], help="name==version in place of the floor")
    parser.add_argument("--check", action="store_true", help="check this environment has the floors")
    args = parser.parse_args()
    pinned = floors(args.pyproject, args.extra, args.pin)
    if not args.check:
        sys.stdout.write("".join(f"{line}\n" for line in pinned))
        return
    problems = check(pinned)
    if problems:
        raise SystemExit("not at the floor:\n" + "\n".join(f"  {problem}" for problem in problems))
    print(f"{len(pinned)} direct dependencies installed at their floors")


if __name__ == "__main__":
    main()
