"""How groupwise writes its findings: one formatting of numbers and one vocabulary of metric names,
shared by every report (a run's summary.md and report.html, each study's report.md, the README's
results, the gate's reasons, the runs export)."""
