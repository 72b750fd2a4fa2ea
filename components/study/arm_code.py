"""Which code each arm of a study ran, and whether a report may pool them.

Every arm's record (`arms/<arm>/arm.json`) names the code that trained and evaluated it (`code`:
git commit, dirty flag, diff digest; `components.code_version`). A report pools arms, so it is written
only when they ran one code, or when every file that differs between their commits lies in the
study's `code_differences` (folders or files named in studies/<name>.yaml; a confirmation allows
none). Code with uncommitted changes can be compared with nothing but itself (its diff digest). Arms
recorded before records named their code are listed as "not recorded" and not checked.

The report then carries a table of each arm's code (`code_lines`), appended to report.md.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from components.code_version import CODE_ROOT, UNKNOWN, CodeVersion
from components.contracts.errors import UserError
from components.study.layout import ARM_FILE, StudyLayout

NOT_RECORDED = "not recorded"


class ArmCodeError(UserError, ValueError):
    """The arms of a study ran code that differs where the study does not allow it."""


def arm_codes(arms_dir: Path) -> dict[str, CodeVersion | None]:
    """{arm: the code its record names, or None (an older record)} for every finished arm."""
    codes = {}
    for record in sorted(Path(arms_dir).glob(f"*/{ARM_FILE}")):
        codes[record.parent.name] = CodeVersion.from_dict(json.loads(record.read_text()).get("code"))
    return codes


def pooled_arm_codes(layouts: list[StudyLayout]) -> dict[str, CodeVersion | None]:
    """`arm_codes` of the first study's arms, then of each pooled study's as "<study>/<arm>"."""
    first, *others = layouts
    codes = arm_codes(first.arms)
    for layout in others:
        codes |= {f"{layout.folder.name}/{arm}": code for arm, code in arm_codes(layout.arms).items()}
    return codes


def changed_paths(a: str, b: str, root: Path = CODE_ROOT) -> list[str] | None:
    """The files that differ between commits `a` and `b` (`git diff --name-only`), or None when git
    cannot tell (a commit it does not have)."""
    try:
        out = subprocess.run(["git", "diff", "--name-only", a, b], cwd=root, capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return [line for line in out.stdout.splitlines() if line]


def _allowed(path: str, allowed: list[str]) -> bool:
    return any(Path(path).is_relative_to(a) for a in allowed)


def check_pooled_code(study_file: str, codes: dict[str, CodeVersion | None], allowed: list[str], root: Path = CODE_ROOT) -> None:
    """ArmCodeError (one line naming the study file, the arms of each code and what differs) unless
    the recorded codes are one, or differ only in `allowed` paths between clean commits."""
    by_code: dict[CodeVersion, list[str]] = {}
    for arm, code in codes.items():
        if code is not None:
            by_code.setdefault(code, []).append(arm)
    if len(by_code) <= 1:
        return
    listed = "; ".join(f"{code.short}: {', '.join(arms)}" for code, arms in by_code.items())
    first, *others = by_code
    if any(code.dirty or code.commit == UNKNOWN for code in by_code):
        why = "code with uncommitted changes (or of no known commit) can be pooled only with itself"
    else:
        outside = []
        for other in others:
            changed = changed_paths(first.commit, other.commit, root)
            if changed is None:
                outside = [f"git cannot compare {first.commit[:12]} and {other.commit[:12]} here"]
                break
            outside += [path for path in changed if not _allowed(path, allowed)]
        if not outside:
            return
        shown = ", ".join(sorted(set(outside))[:5]) + (" …" if len(set(outside)) > 5 else "")
        why = f"they differ outside code_differences {allowed}: {shown}"
    raise ArmCodeError(
        f"{study_file}: its arms ran different code ({listed}); {why}: run the arms again on one commit, or list the "
        "paths that may differ under code_differences"
    )


def code_lines(codes: dict[str, CodeVersion | None]) -> list[str]:
    """The report's table of each arm's code; none when no arm's record names its code."""
    if all(code is None for code in codes.values()):
        return []
    lines = [
        "",
        "## Code",
        "",
        "Each arm's code, from its record (`arms/<arm>/arm.json`).",
        "",
        "| arm | commit | uncommitted changes |",
        "|---|---|---|",
    ]
    for arm, code in codes.items():
        if code is None:
            lines.append(f"| {arm} | {NOT_RECORDED} | |")
        else:
            changes = {None: "unknown", False: "none", True: f"diff `{(code.diff_sha256 or '')[:12]}`"}[code.dirty]
            lines.append(f"| {arm} | `{code.commit[:12]}` | {changes} |")
    return [*lines, ""]
