"""Where a study's results live, the same for every study (in git):

    results/<study>/report.md        the page (regenerated from the arms)
    results/<study>/table.csv        every arm's rows, as the page shows them
    results/<study>/plot.png         the study's figure (learning_curve.png for the consistency study)
    results/<study>/notes.md         what a person adds: findings outside the table ("- " items)
    results/<study>/arms/<arm>/      one finished arm: metrics.json, per-group tables, arm.json, samples
    results/<study>/frozen_params.json  where present: the params every arm starts from, fixed
                                        (`groupwise study --freeze-params`; a pre-registered study)

Speed logs are in results/speed/, measurements of the base model in results/base-model/.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from components.contracts.summary import SUMMARY_FILE

REPORT, TABLE, PLOT, NOTES, ARMS = "report.md", "table.csv", "plot.png", "notes.md", "arms"
FROZEN_PARAMS = "frozen_params.json"
ARM_FILE = "arm.json"  # in arms/<arm>/: the arm's record (name, kind, overrides, fingerprint, machine, seconds)


def has_finished(arm_dir: Path) -> bool:
    """An arm's folder holds a finished arm: its record and its evaluation summary (metrics.json)."""
    return (Path(arm_dir) / ARM_FILE).is_file() and (Path(arm_dir) / SUMMARY_FILE).is_file()


@dataclass(frozen=True)
class StudyLayout:
    """The files of one study's results folder (module docstring)."""

    folder: Path  # results/<study>

    @property
    def report(self) -> Path:
        return self.folder / REPORT

    @property
    def table(self) -> Path:
        return self.folder / TABLE

    @property
    def plot(self) -> Path:
        return self.folder / PLOT

    @property
    def notes_file(self) -> Path:
        return self.folder / NOTES

    @property
    def frozen_params(self) -> Path:
        return self.folder / FROZEN_PARAMS

    @property
    def arms(self) -> Path:
        return self.folder / ARMS

    def notes(self) -> list[str]:
        """The top-level "- " items of notes.md (a person's findings), without the dash; [] without the file.

        An item keeps its indented lines (a wrapped sentence, a nested list) joined by newlines, so a
        report that writes it back as "- item" renders the whole finding, not its first line.
        """
        if not self.notes_file.is_file():
            return []
        items: list[list[str]] = []
        inside = False
        for line in self.notes_file.read_text().splitlines():
            if line.startswith("- "):
                items.append([line[2:]])
                inside = True
            elif inside and line.startswith((" ", "\t")) and line.strip():
                items[-1].append(line)
            else:
                inside = False
        return ["\n".join(item) for item in items]
