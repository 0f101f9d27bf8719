from django.db import migrations, models


class Migration(migrations.Migration):
    # Comments sent before this migration keep ``addressed`` blank: no round judged them,
    # and the panel no longer claims what nothing checked.

    dependencies = [
        ('pipelines', '0018_notes_to_projects'),
    ]

    operations = [
        migrations.AddField(
            model_name='runlinecomment',
            name='made_on_commit',
            field=models.CharField(blank=True, help_text="The run's head commit whose lines the comment numbers.", max_length=64),
        ),
        migrations.AddField(
            model_name='runlinecomment',
            name='addressed',
            field=models.CharField(blank=True, choices=[('changed', 'Changed'), ('explained', 'Not changed, explained'), ('unchanged', 'Not changed')], max_length=16),
        ),
        migrations.AddField(
            model_name='runlinecomment',
            name='reply',
            field=models.TextField(blank=True, help_text='What the Coder said about the comment.'),
        ),
        migrations.AddField(
            model_name='runlinecomment',
            name='judged_at_commit',
            field=models.CharField(blank=True, help_text="The round's head commit ``addressed`` was judged at.", max_length=64),
        ),
    ]
