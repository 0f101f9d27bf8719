# Task.total_cost (tasks 0002) is what all of a task's runs cost, kept by the pipeline as
# calls are paid for (pipelines.runs.services.task_cost_add). Tasks that were run before it
# existed get the sum of their runs; tasks never run keep None. Here, not in tasks, since
# it reads runs: tasks' migrations never depend on pipelines'.

from django.db import migrations
from django.db.models import Exists, OuterRef, Subquery, Sum


def backfill_total_cost(apps, schema_editor):
    Task = apps.get_model("tasks", "Task")
    PipelineRun = apps.get_model("pipelines", "PipelineRun")
    runs = PipelineRun.objects.filter(task=OuterRef("pk")).order_by()
    total = runs.values("task").annotate(total=Sum("cost_usd")).values("total")
    Task.objects.filter(Exists(runs)).update(total_cost=Subquery(total))


class Migration(migrations.Migration):
    dependencies = [
        ("pipelines", "0004_forget_api_keys_of_finished_runs"),
        ("tasks", "0002_task_total_cost"),
    ]

    operations = [
        migrations.RunPython(backfill_total_cost, migrations.RunPython.noop),
    ]
