"""How an evaluation is shown: the report folder a run writes (`evaluation_report`: summary.md,
metrics.json's companions, CSV tables; `html_report`: report.html with the verdict first, the plots,
the answer viewer), the plots (`plots`), BBQ's part (`bbq_report`) and the readable names of metrics
with the direction that is better (`metric_labels`); `evaluation_run` evaluates, then writes it.
`components.evaluation` computes and draws nothing; numbers are written by `components.formatting`.
"""
