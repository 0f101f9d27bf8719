"""Agent notes per project: AgentNote.project (null = the agent's global notes). One note
per owner, agent and project, and one global note per owner and agent (a conditional
constraint: NULLs never collide in a unique index). Existing notes stay global; the
approval sections in them move to their run's project in pipelines 0018 (memory knows
no runs).

Reversible once only global notes are left (pipelines 0018 merges them back first).
"""


import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('memory', '0004_memory_embedding_vector'),
        ('projects', '0005_project_runs_at_once'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterModelOptions(
            name='agentnote',
            options={'ordering': ['agent_id', 'project_id']},
        ),
        migrations.RemoveConstraint(
            model_name='agentnote',
            name='memory_agent_note_unique',
        ),
        migrations.AddField(
            model_name='agentnote',
            name='project',
            field=models.ForeignKey(blank=True, help_text="Empty: the agent's global notes, given in every project.", null=True, on_delete=django.db.models.deletion.CASCADE, related_name='agent_notes', to='projects.project'),
        ),
        migrations.AddConstraint(
            model_name='agentnote',
            constraint=models.UniqueConstraint(fields=('owner', 'agent_id', 'project'), name='memory_agent_note_unique_project'),
        ),
        migrations.AddConstraint(
            model_name='agentnote',
            constraint=models.UniqueConstraint(condition=models.Q(('project__isnull', True)), fields=('owner', 'agent_id'), name='memory_agent_note_unique_global'),
        ),
    ]
