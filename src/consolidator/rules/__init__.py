"""The rules, pure and engine-neutral: what an event is (``events``), when a group is due and what
a claim takes (``policy``), what a batch message is and its id (``batch``), the event shape
(``shape``, ``shape_spec``, ``shape_bounds``), completion messages (``completion``), the buffer's
reference model (``buffer``) and the reference simulation of the serverless schedule
(``simulation``); with the project's exceptions (``errors``) and clocks (``clock``). Nothing here
does I/O; every runtime (Lambda, the worker, Spark) calls these."""
