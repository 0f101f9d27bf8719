"""What the semantic memories' API reads and writes (memory/api/semantic.py): a memory
with where it came from and which runs used it, the queries, a search's results, the
store's status."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.api import StrictBooleanField, StrictCharField
from core.converters import MAX_ID
from memory.models.semantic import APPLIES_WHEN_MAX_LENGTH, MEMORY_MAX_LENGTH, DecayPolicy, Memory, MemorySource
from memory.selectors.semantic import (
    SEARCH_LIMIT_MAX,
    MemorySearchResult,
    MemoryUses,
    memory_confidence,
    memory_fades_at,
    memory_uses_get,
)
from projects.api.fields import OwnedProjectField

SEARCH_QUERY_MAX_LENGTH = 2000


class MemoryUseSerializer(serializers.Serializer):
    run_id = serializers.IntegerField(help_text="The pipeline run that was given the memory.")
    agent = serializers.CharField(help_text="The agent of that run it was given to.")
    used_at = serializers.DateTimeField()


class CitationSerializer(serializers.Serializer):
    path = serializers.CharField(help_text="A file of the project's repository.")
    start = serializers.IntegerField(help_text="First cited line (1-based); 0: the whole file.")
    end = serializers.IntegerField(help_text="Last cited line; 0: the whole file.")
    text = serializers.CharField(help_text="The cited lines as they read at `commit`.", allow_blank=True)
    commit = serializers.CharField(help_text="The commit they were read (or last checked and re-anchored) at.")


class MemorySerializer(serializers.ModelSerializer[Memory]):
    """Needs nothing in its context; a list passes ``uses`` (memory id → MemoryUses) so
    that its rows cost no query each."""

    project = serializers.IntegerField(source="project_id", read_only=True, allow_null=True, help_text="Project id.")
    confidence = serializers.SerializerMethodField(help_text="Current confidence, 0–1 (computed, never stored).")
    fades_at = serializers.SerializerMethodField(
        help_text="When its confidence reaches 0 and it is no longer listed (unless reinforced); null if pinned."
    )
    pinned = serializers.SerializerMethodField(help_text="Permanent: it never fades.")
    use_count = serializers.SerializerMethodField(help_text="How many times runs were given this memory.")
    citations = CitationSerializer(
        many=True,
        read_only=True,
        help_text="Where in the code it was learned; checked against a run's base commit before it is given.",
    )
    path_scoped = serializers.BooleanField(
        read_only=True,
        help_text="About its cited files only: given to a task touching one of them, not as a rule for the whole "
        "project (`POST …/generalise` makes it the whole project's).",
    )
    stale = serializers.SerializerMethodField(help_text="The code it cites is gone: it is never given again.")
    latest_uses = serializers.SerializerMethodField(help_text="The latest few of those, newest first.")

    class Meta:
        model = Memory
        fields: tuple[str, ...] = (
            "id",
            "content",
            "applies_when",
            "memory_type",
            "decay_policy",
            "half_life_hours",
            "agent",
            "personality",
            "project",
            "is_global",
            "source",
            "source_run_id",
            "source_note",
            "confidence",
            "fades_at",
            "pinned",
            "reinforce_count",
            "use_count",
            "latest_uses",
            "created_at",
            "last_reinforced_at",
            "is_deleted",
            "deleted_at",
            "citations",
            "path_scoped",
            "stale",
            "stale_at",
            "stale_reason",
        )
        read_only_fields: tuple[str, ...] = fields

    def get_confidence(self, memory: Memory) -> float:
        return memory_confidence(memory=memory)

    @extend_schema_field(serializers.DateTimeField(allow_null=True))
    def get_fades_at(self, memory: Memory) -> str | None:
        moment = memory_fades_at(memory=memory)
        return None if moment is None else serializers.DateTimeField().to_representation(moment)

    def get_stale(self, memory: Memory) -> bool:
        return memory.stale_at is not None

    def get_pinned(self, memory: Memory) -> bool:
        return memory.decay_policy == DecayPolicy.PERMANENT

    def _uses(self, memory: Memory) -> MemoryUses:
        uses: dict[int, MemoryUses] | None = self.context.get("uses")
        if uses is not None and memory.pk in uses:
            return uses[memory.pk]
        return memory_uses_get(memory=memory)

    def get_use_count(self, memory: Memory) -> int:
        return self._uses(memory).count

    @extend_schema_field(MemoryUseSerializer(many=True))
    def get_latest_uses(self, memory: Memory) -> list[dict[str, Any]]:
        return MemoryUseSerializer(self._uses(memory).latest, many=True).data  # type: ignore[return-value]


class MemoryCreatedSerializer(MemorySerializer):
    created = serializers.SerializerMethodField(
        help_text="False when the memory was already stored in this scope: that memory is returned (reinforced)."
    )
    consolidated = serializers.SerializerMethodField(
        help_text="True when the text was not the same but close in meaning to that memory "
        "(MEMORY_CONSOLIDATE_SIMILARITY): it keeps the longer of the two wordings."
    )

    class Meta(MemorySerializer.Meta):
        fields = (*MemorySerializer.Meta.fields, "created", "consolidated")
        read_only_fields = fields

    def get_created(self, memory: Memory) -> bool:
        return bool(self.context.get("created", True))

    def get_consolidated(self, memory: Memory) -> bool:
        return bool(self.context.get("consolidated", False))


class MemoryListQuerySerializer(serializers.Serializer):
    project = serializers.IntegerField(required=False, help_text="Only this project's memories (one of yours).")
    agent = serializers.CharField(max_length=50, required=False, help_text="Only this agent's memories.")
    source = serializers.ChoiceField(  # type: ignore[assignment]  # a field named "source"
        choices=MemorySource.choices, required=False, help_text="Only from this source."
    )
    q = serializers.CharField(max_length=SEARCH_QUERY_MAX_LENGTH, required=False, help_text="Text contained, any case.")
    include_faded = serializers.BooleanField(
        required=False, default=False, help_text="Also the memories whose confidence has reached 0."
    )


NOTHING_TO_EDIT = "Give the new text, the line saying when it applies, or both."


class MemoryEditSerializer(serializers.Serializer):
    content = StrictCharField(
        max_length=MEMORY_MAX_LENGTH,
        required=False,
        help_text="The new text; it is embedded again. Left out: the current text stays.",
    )
    applies_when = StrictCharField(
        max_length=APPLIES_WHEN_MAX_LENGTH,
        required=False,
        allow_blank=True,
        help_text="When it applies (the kinds of tasks and files it is for); embedded with the text. "
        "Left out: the current line stays.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not attrs:
            raise serializers.ValidationError(
                {"content": ["Give the new text, the line saying when it applies, or both."]}
            )
        return attrs


class MemoryCreateSerializer(serializers.Serializer):
    content = StrictCharField(max_length=MEMORY_MAX_LENGTH)
    applies_when = StrictCharField(
        max_length=APPLIES_WHEN_MAX_LENGTH,
        required=False,
        allow_blank=True,
        default="",
        help_text="When it applies (the kinds of tasks and files it is for); embedded with the text.",
    )
    memory_type = StrictCharField(max_length=50, required=False, default="note")
    decay_policy = serializers.ChoiceField(
        choices=DecayPolicy.choices, required=False, default=DecayPolicy.REINFORCEABLE
    )
    half_life_hours = serializers.FloatField(min_value=0.001, max_value=1_000_000, required=False)
    agent = StrictCharField(max_length=50, required=False, allow_blank=True, default="")
    personality = StrictCharField(max_length=50, required=False, allow_blank=True, default="")
    project = OwnedProjectField(required=False, allow_null=True, default=None, help_text="One of your projects.")
    is_global = StrictBooleanField(required=False, default=False)


class MemorySearchQuerySerializer(serializers.Serializer):
    q = serializers.CharField(max_length=SEARCH_QUERY_MAX_LENGTH, help_text="What to look for, in any words.")
    limit = serializers.IntegerField(min_value=1, max_value=SEARCH_LIMIT_MAX, default=10, required=False)
    min_confidence = serializers.FloatField(min_value=0.0, max_value=1.0, default=0.0, required=False)
    agent = serializers.CharField(max_length=50, required=False)
    personality = serializers.CharField(max_length=50, required=False)
    project = serializers.IntegerField(
        required=False, min_value=1, max_value=MAX_ID, help_text="Only memories of this project."
    )
    type = serializers.CharField(max_length=50, required=False, help_text="Only memories of this type.")
    # A query-string boolean: "true"/"false" (also 1/0).
    is_global = serializers.BooleanField(
        required=False, allow_null=True, default=None, source="global_", help_text="Only global (or non-global) ones."
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # "global" is a Python keyword: the field is declared under another name.
        self.fields["global"] = self.fields.pop("is_global")


class MemorySearchResultSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    content = serializers.CharField()
    similarity = serializers.FloatField(help_text="Cosine similarity to the query, -1–1.")
    confidence = serializers.FloatField(help_text="Current confidence, 0–1.")
    score = serializers.FloatField(help_text="similarity × confidence: the ranking key.")
    memory_type = serializers.CharField()
    decay_policy = serializers.ChoiceField(choices=DecayPolicy.choices)
    agent = serializers.CharField()
    personality = serializers.CharField()
    project = serializers.IntegerField(allow_null=True)
    is_global = serializers.BooleanField()
    created_at = serializers.DateTimeField()
    last_reinforced_at = serializers.DateTimeField()


class MemorySearchResponseSerializer(serializers.Serializer):
    results = MemorySearchResultSerializer(many=True)


class MemoryStatusSerializer(serializers.Serializer):
    embedding_model = serializers.CharField()
    dimensions = serializers.IntegerField()
    memories = serializers.IntegerField(help_text="Your live memories.")
    deleted = serializers.IntegerField(help_text="Your soft-deleted memories.")
    index_size = serializers.IntegerField(help_text="Your live memories of the current embedding model.")
    vector_store = serializers.CharField()


def search_result_data(result: MemorySearchResult) -> dict[str, Any]:
    memory = result.memory
    return {
        "id": memory.pk,
        "content": memory.content,
        "similarity": round(result.similarity, 6),
        "confidence": round(result.confidence, 6),
        "score": round(result.score, 6),
        "memory_type": memory.memory_type,
        "decay_policy": memory.decay_policy,
        "agent": memory.agent,
        "personality": memory.personality,
        "project": memory.project_id,
        "is_global": memory.is_global,
        "created_at": memory.created_at,
        "last_reinforced_at": memory.last_reinforced_at,
    }
