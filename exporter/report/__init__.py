"""`kube-gpu-exporter report`: a self-contained GPU efficiency report over a period, read from
any Prometheus that scrapes the exporter and evaluates its recording rules.

The charts and tables are drawn from the Grafana dashboards' own query functions
(grafana/queries.py), evaluated over the period through Prometheus' HTTP API, so a number in
the report is the number a panel shows. Jinja2 and matplotlib come with the `report` extra and
are imported only when the command runs.
"""
