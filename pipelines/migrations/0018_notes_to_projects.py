"""The sections an approval wrote into an agent's (global) notes move to the notes of
the run's project, as references to the memories the run taught (memory 0005 gave notes
a project; memory.references). Here, not in memory: only pipelines knows runs.

A section moves when it is exactly what ``lessons_on_approval`` wrote — a heading
ending in "· run <pk>" and one line starting "Run N of task #" — its run still exists,
is of the note's owner, and the run's ``lessons`` name the Coder's memories its line
quoted ("Learned: …") or name none ("It taught nothing new."). Everything else — what
a person wrote or promoted, a summary, a section edited by hand, a run deleted since —
stays in the global notes as it was.

Reversible, losing nothing: each project's notes go back into the global notes (an
approval section in the old wording, its lessons quoted from the memories' text now;
any other text as it is, a project's own text under a heading naming the project),
update sections in time order, and the project notes' earlier versions are kept on the
global notes.
"""

import re

from django.db import migrations

CODER = "coder"
UPDATES_HEADING = "## Updates"
UPDATES_LINE = re.compile(r"(?m)^## Updates[ \t]*$")
SECTION_START = re.compile(r"(?m)^(?=### )")
APPROVAL_SECTION = re.compile(
    r"### (?P<heading>[^\n]*· run (?P<run>\d+))\n\n(?P<text>Run \d+ of task #\d+ [^\n]*(?:\n- Learned: [^\n]*)*)\n*"
)
APPROVED = re.compile(r"Run \d+ of task #\d+ “.*?” was approved\.")
REINFORCED = re.compile(r" (?P<reinforced>Reinforced \d+ memor(?:y|ies) it was given\.)$")
NOTHING_NEW = "It taught nothing new."
LEARNED_BULLET = re.compile(r"- Learned: \[memory:(\d+)\]")
HEADING_TIME = re.compile(r"### (\d{4}-\d{2}-\d{2} \d{2}:\d{2})")


def _split(content):
    """(the notes up to and with "## Updates", [update sections]); None without one."""
    match = UPDATES_LINE.search(content)
    if match is None:
        return None
    rest = content[match.end() :]
    head, *sections = SECTION_START.split(rest)
    return content[: match.end()] + head, sections


def _joined(head, sections):
    text = (head + "".join(sections)).rstrip()
    return text + "\n" if text.strip() else ""


def _section(heading, text):
    return f"### {heading}\n\n{text}\n\n"


def _coder_memory_ids(lessons):
    taught = []
    for entry in lessons or []:
        for memory in entry.get("memories") or [] if isinstance(entry, dict) else []:
            memory_id = memory.get("id") if isinstance(memory, dict) and memory.get("agent") == CODER else None
            if isinstance(memory_id, int) and memory_id not in taught:
                taught.append(memory_id)
    return taught


def _with_references(line, run):
    """The approval's line as lessons_on_approval now writes it, or None when the line
    does not say what the run's lessons say (left as it is)."""
    approved = APPROVED.match(line)
    if approved is None:
        return None
    reinforced = REINFORCED.search(line)
    said = line[approved.end() : reinforced.start() if reinforced else len(line)].strip()
    taught = _coder_memory_ids(run.lessons)
    first = approved.group(0)
    if said == NOTHING_NEW and not taught:
        first += f" {NOTHING_NEW}"
    elif not (said.startswith("Learned: ") and taught):
        return None
    if reinforced:
        first += f" {reinforced.group('reinforced')}"
    return "\n".join([first, *(f"- Learned: [memory:{memory_id}]" for memory_id in taught)])


def notes_to_projects(apps, schema_editor):
    AgentNote = apps.get_model("memory", "AgentNote")
    PipelineRun = apps.get_model("pipelines", "PipelineRun")
    for note in AgentNote.objects.filter(project__isnull=True).order_by("pk").iterator():
        split = _split(note.content)
        if split is None:
            continue
        head, sections = split
        kept, moved = [], {}
        for section in sections:
            match = APPROVAL_SECTION.fullmatch(section)
            run = None
            if match is not None and "\n- Learned: " not in match.group("text"):
                run = (
                    PipelineRun.objects.select_related("task__project")
                    .filter(pk=int(match.group("run")), task__project__owner_id=note.owner_id)
                    .first()
                )
            text = _with_references(match.group("text"), run) if run is not None else None
            if text is None:
                kept.append(section)
                continue
            moved.setdefault(run.task.project_id, []).append(_section(match.group("heading"), text))
        if not moved:
            continue
        for project_id, project_sections in moved.items():
            project_note, _ = AgentNote.objects.get_or_create(
                owner_id=note.owner_id, agent_id=note.agent_id, project_id=project_id
            )
            existing = project_note.content.rstrip() or UPDATES_HEADING
            if UPDATES_LINE.search(existing) is None:
                existing += f"\n\n{UPDATES_HEADING}"
            project_note.content = _joined(existing + "\n\n", project_sections)
            project_note.save(update_fields=["content", "updated_at"])
        # Nothing but the heading left: no notes for every project (yet).
        note.content = _joined(head, kept) if kept or UPDATES_LINE.sub("", head).strip() else ""
        note.save(update_fields=["content", "updated_at"])


def _old_wording(text, contents):
    """An approval section's text in the wording before references (quoted lessons)."""
    first, *bullets = text.split("\n")
    ids = [int(match.group(1)) for bullet in bullets if (match := LEARNED_BULLET.fullmatch(bullet))]
    if not bullets or len(ids) != len(bullets):
        return text
    approved = APPROVED.match(first)
    if approved is None:
        return text
    reinforced = first[approved.end() :].strip()
    quoted = [contents.get(memory_id, f"[memory:{memory_id}]") for memory_id in ids]
    shown = [f"“{content if len(content) <= 120 else content[:119] + '…'}”" for content in quoted[:3]]
    more = len(quoted) - len(shown)
    line = f"{approved.group(0)} Learned: " + "; ".join(shown) + (f" and {more} more" if more > 0 else "") + "."
    return line + (f" {reinforced}" if reinforced else "")


def _merged_in_time_order(sections, added):
    """``added`` put among ``sections`` before the first one headed by a later time."""
    merged = list(sections)
    for section in added:
        when = HEADING_TIME.match(section)
        index = len(merged)
        if when is not None:
            index = next(
                (
                    position
                    for position, other in enumerate(merged)
                    if (other_when := HEADING_TIME.match(other)) and other_when.group(1) > when.group(1)
                ),
                len(merged),
            )
        merged.insert(index, section)
    return merged


def notes_to_global(apps, schema_editor):
    AgentNote = apps.get_model("memory", "AgentNote")
    AgentNoteRevision = apps.get_model("memory", "AgentNoteRevision")
    Memory = apps.get_model("memory", "Memory")
    merged = []
    for project_note in (
        AgentNote.objects.filter(project__isnull=False).select_related("project").order_by("pk").iterator()
    ):
        split = _split(project_note.content) or (project_note.content, [])
        own_text, sections = split[0], split[1]
        own_text = UPDATES_LINE.sub("", own_text).strip()
        ids = {int(found) for found in re.findall(r"\[memory:(\d+)\]", project_note.content)}
        contents = dict(Memory.objects.filter(pk__in=ids).values_list("pk", "content"))
        back = []
        for section in sections:
            match = re.fullmatch(r"### (?P<heading>[^\n]*)\n\n(?P<text>.*?)\n*", section, re.S)
            if match is None:
                back.append(section.rstrip() + "\n\n")
                continue
            back.append(_section(match.group("heading"), _old_wording(match.group("text"), contents)))
        if own_text:
            back.insert(0, _section(f"Notes of the project “{project_note.project.name}”", own_text))
        note, _ = AgentNote.objects.get_or_create(
            owner_id=project_note.owner_id, agent_id=project_note.agent_id, project=None
        )
        head, kept = _split(note.content) or ((note.content.rstrip() + f"\n\n{UPDATES_HEADING}").lstrip(), [])
        if kept:
            kept[-1] = kept[-1].rstrip() + "\n\n"
        if not head.endswith("\n\n"):
            head = head.rstrip() + "\n\n"
        note.content = _joined(head, _merged_in_time_order(kept, back))
        note.save(update_fields=["content", "updated_at"])
        AgentNoteRevision.objects.filter(note_id=project_note.pk).update(note_id=note.pk)
        merged.append(project_note.pk)
    # Nothing refers to them any more (their revisions moved). Not Model.delete(): its
    # cascade meets the reverse state's re-rendered model classes and refuses them.
    if merged:
        AgentNote.objects.filter(pk__in=merged)._raw_delete(schema_editor.connection.alias)


class Migration(migrations.Migration):
    dependencies = [
        ("pipelines", "0017_run_message_delivered_agent"),
        ("memory", "0005_agent_note_project"),
    ]

    operations = [
        migrations.RunPython(notes_to_projects, notes_to_global),
    ]
