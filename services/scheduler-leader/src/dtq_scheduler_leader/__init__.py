"""dtq scheduler-leader: one elected replica promotes due tasks, fires schedules and marks
stale workers (``dtq-scheduler``)."""
