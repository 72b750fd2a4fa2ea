"""A study's notes.md as the reports read it (components.study.layout.StudyLayout.notes)."""

from components.study.layout import StudyLayout


def test_notes_keep_a_wrapped_finding_whole_and_leave_out_prose(tmp_path):
    layout = StudyLayout(tmp_path)
    assert layout.notes() == []  # no notes.md: no notes
    (tmp_path / "notes.md").write_text(
        "# Title\n"
        "Why: prose outside any item is not a finding.\n"
        "- First finding, wrapped\n"
        "  onto a second line.\n"
        "  - a nested detail\n"
        "\n"
        "  after a blank line: not part of the item\n"
        "- Second finding on one line.\n"
        "Prose again.\n"
        "  indented prose after prose\n"
    )
    assert layout.notes() == [
        "First finding, wrapped\n  onto a second line.\n  - a nested detail",
        "Second finding on one line.",
    ]
