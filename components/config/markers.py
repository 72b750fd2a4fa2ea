"""The lines around params.yaml's generated part, and which profile's values the part holds."""

from __future__ import annotations

import re

BEGIN = "# ---- defaults: generated from components/config/ by `python -m components.config.document --write params.yaml` ----"
# the first line of a generated part holding a profile's values (`groupwise use-profile NAME`)
PROFILE_BEGIN = "# ---- defaults with profile {name}: generated from components/config/ by `groupwise use-profile {name}` ----"
BEGIN_LINE = re.compile(r"^# ---- defaults(?: with profile (\S+))?: generated from components/config/ by .* ----$", re.M)
END = "# ---- end of the generated defaults ----"


def written_profile(text: str) -> str | None:
    """The profile whose values a params file's generated part holds ('default' for the typed defaults; None
    for a file without a generated part)."""
    found = BEGIN_LINE.search(text)
    return None if found is None else found.group(1) or "default"
