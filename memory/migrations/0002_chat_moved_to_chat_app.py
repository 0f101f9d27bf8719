# The chat models now belong to the chat app (chat/migrations/0001_initial.py); their
# tables stay where they are, so this only updates Django's state.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0001_initial"),
        ("chat", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="ChatMessage"),
                migrations.DeleteModel(name="ChatSession"),
            ],
            database_operations=[],
        ),
    ]
