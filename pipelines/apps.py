from __future__ import annotations

from django.apps import AppConfig


class PipelinesConfig(AppConfig):
    name = "pipelines"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from celery.signals import beat_init
        from django.db.models.signals import post_delete

        from memory.selectors.context import context_run_items_lister_register
        from memory.selectors.notes import daily_log_session_page_register
        from memory.selectors.semantic import memory_run_namer_register
        from pipelines.agents.lineage import RUN_SESSION_PREFIX, context_list_for_run_id
        from pipelines.models import PipelineRun
        from pipelines.runs.costs import run_deleted
        from pipelines.runs.leases import sweeper_start
        from pipelines.runs.selectors import run_names

        # The sweeper runs wherever beat runs: the celery beat process, or the embedded
        # server's beat thread (config/embedded.py stops it with beat).
        beat_init.connect(sweeper_start, weak=False, dispatch_uid="pipelines.sweeper_start")
        # Memory knows no runs: its context API lists a run's items (``?run=``) through us,
        # and its daily log links a run's session to the run's lineage page.
        context_run_items_lister_register(context_list_for_run_id)
        daily_log_session_page_register(prefix=RUN_SESSION_PREFIX, url_name="pipelines:run-lineage")
        # ...and its Memory page names the runs a memory came from and was given to.
        memory_run_namer_register(run_names)
        # A task's total cost (Task.total_cost) counts its runs: deleting one recounts it.
        post_delete.connect(run_deleted, sender=PipelineRun, dispatch_uid="pipelines.run_deleted")
