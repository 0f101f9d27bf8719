# The sweeper left beat's schedule long ago (it is a loop in the beat process,
# pipelines/runs/leases.py); databases scheduled before that still hold its periodic
# task, which would now name a job no worker knows. The job is gone with it.
from django.db import migrations

OLD_JOB = "pipelines.tasks.pipeline_sweep"


def forget_the_sweep_job(apps, schema_editor):
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    PeriodicTask.objects.filter(task=OLD_JOB).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("pipelines", "0014_run_environment"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(forget_the_sweep_job, migrations.RunPython.noop)]
