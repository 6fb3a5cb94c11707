"""Scheduled profiling: the schedule annotation, cron times, and the controller's runner."""
