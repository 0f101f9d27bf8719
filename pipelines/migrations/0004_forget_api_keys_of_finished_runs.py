# A run's key is deleted when the run ends (pipelines.runs.services.run_transition); runs
# that ended before that rule still hold theirs.

from django.db import migrations

FINAL_STATUSES = ("approved", "failed", "cancelled")


def forget_keys(apps, schema_editor):
    PipelineRun = apps.get_model("pipelines", "PipelineRun")
    PipelineRun.objects.filter(status__in=FINAL_STATUSES).exclude(api_key_encrypted="").update(api_key_encrypted="")


class Migration(migrations.Migration):
    dependencies = [
        ("pipelines", "0003_agentcall_reuse"),
    ]

    operations = [
        migrations.RunPython(forget_keys, migrations.RunPython.noop),
    ]
