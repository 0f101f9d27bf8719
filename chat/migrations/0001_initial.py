# The chat moved out of the memory app. Its tables keep their names (memory_chatsession,
# memory_chatmessage): this migration only tells Django's state that the models now
# belong here, and moves their content types (with the permissions and admin history
# that point at them) to the new app label.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

MODELS = ("chatsession", "chatmessage")


def move_content_types(apps, schema_editor):
    content_type = apps.get_model("contenttypes", "ContentType")
    for model in MODELS:
        if not content_type.objects.filter(app_label="chat", model=model).exists():
            content_type.objects.filter(app_label="memory", model=model).update(app_label="chat")


def restore_content_types(apps, schema_editor):
    content_type = apps.get_model("contenttypes", "ContentType")
    for model in MODELS:
        if not content_type.objects.filter(app_label="memory", model=model).exists():
            content_type.objects.filter(app_label="chat", model=model).update(app_label="memory")


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("memory", "0001_initial"),
        ("projects", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="ChatSession",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("provider_session_id", models.CharField(blank=True, max_length=200)),
                        ("message_count", models.PositiveIntegerField(default=0)),
                        ("last_activity", models.DateTimeField(db_index=True)),
                        ("closed_at", models.DateTimeField(blank=True, null=True)),
                        ("processing", models.BooleanField(default=False)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        (
                            "project",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="chat_sessions",
                                to="projects.project",
                            ),
                        ),
                        (
                            "user",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="chat_sessions",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={"db_table": "memory_chatsession", "ordering": ["-last_activity"]},
                ),
                migrations.CreateModel(
                    name="ChatMessage",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("role", models.CharField(choices=[("user", "User"), ("assistant", "Assistant")], max_length=16)),
                        ("text", models.TextField(help_text="As shown to the user (markers removed).", max_length=20000)),
                        ("confirmations", models.JSONField(blank=True, default=list)),
                        (
                            "status",
                            models.CharField(
                                choices=[
                                    ("queued", "Queued"),
                                    ("processing", "Processing"),
                                    ("done", "Done"),
                                    ("error", "Error"),
                                ],
                                default="done",
                                max_length=16,
                            ),
                        ),
                        ("attachment", models.BinaryField(blank=True, null=True)),
                        ("attachment_type", models.CharField(blank=True, max_length=50)),
                        ("input_tokens", models.PositiveIntegerField(default=0)),
                        ("output_tokens", models.PositiveIntegerField(default=0)),
                        ("created_at", models.DateTimeField(auto_now_add=True, db_index=True)),
                        (
                            "reply_to",
                            models.OneToOneField(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="reply",
                                to="chat.chatmessage",
                            ),
                        ),
                        (
                            "session",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="messages",
                                to="chat.chatsession",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "memory_chatmessage",
                        "ordering": ["created_at", "id"],
                        "indexes": [
                            models.Index(fields=["session", "status", "id"], name="memory_chat_session_a92579_idx")
                        ],
                    },
                ),
            ],
            database_operations=[migrations.RunPython(move_content_types, restore_content_types)],
        ),
    ]
