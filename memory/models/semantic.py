from __future__ import annotations

from django.conf import settings
from django.db import models

from memory.embeddings import DIMENSIONS
from memory.models.fields import EmbeddingField

MEMORY_MAX_LENGTH = 10_000
SOURCE_NOTE_MAX_LENGTH = 500
APPLIES_WHEN_MAX_LENGTH = 300


class DecayPolicy(models.TextChoices):
    PERMANENT = "permanent", "Permanent"
    CONTEXTUAL = "contextual", "Contextual (fades from creation)"
    REINFORCEABLE = "reinforceable", "Reinforceable (fades unless reinforced)"


class MemorySource(models.TextChoices):
    """Where a memory came from: people stay in charge of what the agents are told."""

    PERSON = "person", "Person"  # written by a person: the page, the API, the chat
    FEEDBACK = "feedback", "Feedback"  # a person's request for changes on a run
    FINDING = "finding", "Review finding"  # a finding a fix round had to fix
    AGENT = "agent", "Agent"  # an agent wrote it
    DISTILLED = "distilled", "Distilled"  # distilled by the model from a run


def default_half_life_hours() -> float:
    return float(settings.MEMORY_DEFAULT_HALF_LIFE_HOURS)


class Memory(models.Model):
    """A semantic memory. Its confidence is computed, never stored
    (memory.decay.compute_confidence); its embedding lives here with it."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memories")
    content = models.TextField(max_length=MEMORY_MAX_LENGTH)
    # When the lesson applies (the kinds of tasks and files it is for), written with it
    # (by the distiller, or a person); embedded with the content, since a task's words
    # match it more often than the lesson's own (bench_memory_retrieval.py).
    applies_when = models.CharField(max_length=APPLIES_WHEN_MAX_LENGTH, blank=True)
    content_hash = models.CharField(max_length=64, db_index=True, editable=False)
    memory_type = models.CharField(max_length=50, default="note")
    decay_policy = models.CharField(max_length=16, choices=DecayPolicy.choices, default=DecayPolicy.REINFORCEABLE)
    half_life_hours = models.FloatField(default=default_half_life_hours)
    # A pinned memory is made permanent; this is the policy it goes back to when unpinned.
    unpinned_policy = models.CharField(max_length=16, choices=DecayPolicy.choices, blank=True)
    agent = models.CharField(max_length=50, blank=True)
    personality = models.CharField(max_length=50, blank=True)
    project = models.ForeignKey(
        "projects.Project", null=True, blank=True, on_delete=models.CASCADE, related_name="memories"
    )
    is_global = models.BooleanField(default=False)
    created_at = models.DateTimeField(db_index=True)
    last_reinforced_at = models.DateTimeField()
    reinforce_count = models.PositiveIntegerField(default=0)
    is_deleted = models.BooleanField(default=False, db_index=True)
    deleted_at = models.DateTimeField(null=True, blank=True)
    # Searched in the database (memory.vector_store); embedding_model names the model
    # that made it, and only the current model's are searched.
    embedding = EmbeddingField(dimensions=DIMENSIONS)
    embedding_model = models.CharField(max_length=100, editable=False)
    # The owner's MemoryVectorsVersion that last wrote this row's vector (0: written
    # before versions were stamped): a process's copy at version v of the owner's
    # vectors reads only the rows above v to catch up (memory.owner_vectors).
    vectors_version = models.PositiveBigIntegerField(default=0, editable=False)
    updated_at = models.DateTimeField(auto_now=True, db_index=True)
    source = models.CharField(max_length=16, choices=MemorySource.choices, default=MemorySource.PERSON)
    # The pipeline run it came from. An id, not a ForeignKey: memory knows no runs
    # (ARCHITECTURE.md, "Apps as layers").
    source_run_id = models.PositiveBigIntegerField(null=True, blank=True)
    source_note = models.CharField(max_length=SOURCE_NOTE_MAX_LENGTH, blank=True)
    # Where in the code a lesson came from (memory.citations.Citation.as_dict: path,
    # lines, the cited text and its hash, the commit), checked against a run's base
    # commit before the memory is given to it (memory.services.semantic.memory_citations_check).
    citations = models.JSONField(default=list, blank=True)
    # About its cited files only: recalled for a task touching one of them, never as a
    # rule for the whole project (until a person generalises it).
    path_scoped = models.BooleanField(default=False)
    # The last commit its citations were checked against (checked once per commit).
    checked_commit = models.CharField(max_length=64, blank=True, editable=False)
    # Stale: the code it cites is gone. Never recalled again; the Memory page says why.
    stale_at = models.DateTimeField(null=True, blank=True)
    stale_reason = models.CharField(max_length=SOURCE_NOTE_MAX_LENGTH, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "memories"
        indexes = [
            models.Index(fields=["owner", "is_deleted"]),
            # The rows written since a copy's version, without reading the owner's others.
            models.Index(fields=["owner", "vectors_version"], name="memory_owner_vectors_version"),
        ]

    def __str__(self) -> str:
        return self.content[:80]


class MemoryCitedPath(models.Model):
    """A file a memory's citations name (Memory.citations, kept in step by
    memory.services.semantic): recall finds the memories about a task's files by index,
    by path or by file name, without reading the memories themselves."""

    memory = models.ForeignKey(Memory, on_delete=models.CASCADE, related_name="cited_path_rows")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    path = models.CharField(max_length=1000)
    # The file's name ("feature.py" of "src/feature.py"): a task's text often names only that.
    name = models.CharField(max_length=255)

    class Meta:
        indexes = [
            models.Index(fields=["owner", "path"], name="memory_cited_owner_path"),
            models.Index(fields=["owner", "name"], name="memory_cited_owner_name"),
        ]
        constraints = [models.UniqueConstraint(fields=["memory", "path"], name="memory_cited_path_once")]

    def __str__(self) -> str:
        return f"memory {self.memory_id} cites {self.path}"


class MemoryUse(models.Model):
    """A run was given this memory (in an agent's prompt). The run is an id: see
    Memory.source_run_id."""

    memory = models.ForeignKey(Memory, on_delete=models.CASCADE, related_name="uses")
    run_id = models.PositiveBigIntegerField()
    agent = models.CharField(max_length=50, blank=True)
    used_at = models.DateTimeField()

    class Meta:
        ordering = ["-used_at", "-id"]
        indexes = [models.Index(fields=["memory", "used_at"])]

    def __str__(self) -> str:
        return f"memory {self.memory_id} in run {self.run_id}"


class MemoryVectorsVersion(models.Model):
    """How many times an owner's memory vectors changed (a memory written, consolidated
    or rewritten: memory.services.semantic), each write stamping the rows it wrote
    with its version (Memory.vectors_version). A process that keeps a heavy owner's
    vectors in RAM (memory.owner_vectors) reads it before each search and, when it
    moved, reads the rows stamped above its copy's version. No row: version 0."""

    owner = models.OneToOneField(settings.AUTH_USER_MODEL, primary_key=True, on_delete=models.CASCADE, related_name="+")
    version = models.PositiveBigIntegerField(default=0)

    def __str__(self) -> str:
        return f"memory vectors of user {self.owner_id}: version {self.version}"
