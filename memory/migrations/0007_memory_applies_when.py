from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0006_memory_citations"),
    ]

    operations = [
        migrations.AddField(
            model_name="memory",
            name="applies_when",
            field=models.CharField(blank=True, max_length=300),
        ),
    ]
