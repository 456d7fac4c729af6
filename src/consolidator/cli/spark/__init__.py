"""``consolidator spark ...``: the Spark jobs' commands (``commands``), their options (``options``)
and the replay's report (``report``, ``report_chart``, ``report_choice``)."""
