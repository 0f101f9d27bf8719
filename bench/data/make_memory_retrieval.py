"""Write bench/data/memory_retrieval.jsonl, the labelled set of bench_memory_retrieval.py.

Run: .venv/bin/python bench/data/make_memory_retrieval.py

One JSON object a line:

* ``{"kind": "pair", "id", "query", "memory", "split", "overlap"}``: a hand-written
  (task, memory) pair from pairs.py. ``split`` is "tune" (every third pair, for choosing
  the fusion's parameters) or "test" (reported); ``overlap`` is the share of the memory's
  content words that the query also has (0 = none), printed by the benchmark.
* ``{"kind": "distractor", "memory"}``: the hand-written decoys from pairs.py, then
  memories from the templates below (conventions, review lessons, feedback, incidents,
  decisions and facts about a made-up codebase), at least 2,000 in all.
* ``{"kind": "scale", "memory"}``: more template memories, only used to bring one user
  to 10,000 memories for the latency measurement.

Seeded: the same file on every run.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import NamedTuple

from applies_when import APPLIES_WHEN, DECOY_APPLIES_WHEN
from pairs import DECOYS, PAIRS
from task_context import TASK_CONTEXT

HERE = Path(__file__).resolve().parent
OUT = HERE / "memory_retrieval.jsonl"
DISTRACTORS = 2_100
TOTAL = 10_000

# (name, path, team): the components of the made-up codebase.
COMPONENTS = [
    ("the audit log", "audit/", "platform"),
    ("the calendar sync", "calendars/sync.py", "integrations"),
    ("the time tracking module", "timesheets/", "core"),
    ("the mobile push sender", "notifications/push.py", "mobile"),
    ("the Slack integration", "integrations/slack/", "integrations"),
    ("the Jira importer", "importers/jira.py", "integrations"),
    ("the usage metering", "billing/metering.py", "billing"),
    ("the tax engine", "billing/tax/", "billing"),
    ("the feature-flag service", "flags/", "platform"),
    ("the search indexer", "search/indexer.py", "core"),
    ("the comment threads", "comments/", "core"),
    ("the file previews", "attachments/previews.py", "core"),
    ("the SAML login", "accounts/saml.py", "identity"),
    ("the two-factor setup", "accounts/mfa/", "identity"),
    ("the public status page", "statuspage/", "platform"),
    ("the recurring tasks", "tasks/recurrence.py", "core"),
    ("the Gantt chart", "frontend/gantt/", "web"),
    ("the team directory", "teams/directory.py", "identity"),
    ("the data retention job", "retention/", "platform"),
    ("the e-mail parser", "inbound/parser.py", "integrations"),
    ("the custom fields", "fields/", "core"),
    ("the workload view", "frontend/workload/", "web"),
    ("the referral programme", "growth/referrals.py", "growth"),
    ("the trial expiry emails", "growth/trials.py", "growth"),
    ("the analytics exporter", "analytics/export.py", "data"),
    ("the event warehouse loader", "analytics/loader.py", "data"),
    ("the agent sandbox", "sandbox/", "agents"),
    ("the review agent", "agents/reviewer.py", "agents"),
    ("the prompt library", "agents/prompts/", "agents"),
    ("the token budget tracker", "agents/budget.py", "agents"),
    ("the repository mirror", "repos/mirror.py", "agents"),
    ("the diff viewer", "frontend/diff/", "web"),
    ("the API key management", "accounts/api_keys.py", "identity"),
    ("the GDPR export", "privacy/export.py", "platform"),
    ("the invoice numbering", "billing/numbering.py", "billing"),
    ("the coupon codes", "billing/coupons.py", "billing"),
    ("the kanban swimlanes", "boards/swimlanes.py", "core"),
    ("the guest access", "sharing/guests.py", "identity"),
    ("the template gallery", "templates_gallery/", "growth"),
    ("the offline mode", "frontend/offline/", "mobile"),
]
TEAMS_PEOPLE = {
    "platform": ["Priya", "Jonas"],
    "integrations": ["Lena", "Omar"],
    "core": ["Sam", "Ines"],
    "mobile": ["Kenji", "Ava"],
    "billing": ["Marco", "Fatima"],
    "identity": ["Chloe", "Viktor"],
    "web": ["Noah", "Elif"],
    "growth": ["Zoe", "Rafael"],
    "data": ["Hana", "Dmitri"],
    "agents": ["Ruth", "Tariq"],
}
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October"]
YEARS = ["2022", "2023", "2024", "2025"]

FACT_TEMPLATES = [
    "The code for {c} lives in {p}.",
    "{C} is owned by the {t} team; {person} is the first contact.",
    "{C} was rewritten in {month} {year} after it kept {failure}.",
    "The tests for {c} take about {n} seconds and are marked slow.",
    "{C} has no tests for {edge}; add one before changing it.",
    "{C} still uses {legacy}; moving off it is on the roadmap.",
    "{C} reads its configuration from the {setting} setting.",
    "{C} is disabled for customers on the free plan.",
    "{person} knows the history of {c}; ask before large changes.",
    "{C} depends on {service} and degrades gracefully when it is down.",
    "Errors from {c} are grouped under the '{t}' tag in Sentry.",
    "{C} logs one line per {unit} at INFO, nothing more.",
    "The feature flag for {c} is rolled out to {pct}% of accounts.",
    "{C} was built by a contractor and has little documentation.",
    "The p95 latency of {c} is around {ms} ms in production.",
    "{C} runs in its own worker queue so that it cannot block the others.",
    "{C} keeps its state in Redis under the prefix '{prefix}:'.",
    "The dashboards for {c} are in Grafana under '{t} / {short}'.",
]
FAILURES = [
    "timing out on large accounts",
    "losing updates under concurrent edits",
    "sending duplicates after retries",
    "leaking memory in long-running workers",
    "breaking on daylight-saving changes",
    "exceeding the provider's rate limits",
    "blocking the event loop",
    "producing wrong totals for multi-currency accounts",
]
EDGES = [
    "empty inputs",
    "accounts with more than one owner",
    "leap years",
    "non-Latin characters",
    "deleted users",
    "very long titles",
    "archived projects",
    "time zones east of UTC+12",
]
LEGACY = [
    "the old REST client",
    "Python 2 style string formatting",
    "a raw SQL view",
    "jQuery on its settings page",
    "the deprecated v1 webhook format",
    "pickled values in the cache",
    "a vendored copy of a library",
    "class-based signals",
]
SERVICES = ["Redis", "the object store", "the SMTP relay", "the Google API", "the search cluster", "the LLM provider"]
UNITS = ["request", "batch", "sync run", "delivery", "import", "job"]

CONVENTION_TEMPLATES = [
    "In {area}, {rule}.",
    "Convention for {area}: {rule}.",
    "We agreed that in {area} {rule}.",
]
AREAS_RULES = {
    "the frontend code": [
        "components are named in PascalCase and files in kebab-case",
        "no inline styles; use the utility classes",
        "every form shows field errors next to the field, not in a banner",
        "buttons that submit use type=submit explicitly",
        "keyboard shortcuts are listed in the help overlay",
        "loading states use the skeleton partial",
    ],
    "the analytics pipeline": [
        "event names are past-tense verbs like task_completed",
        "personal data is hashed before it leaves the app",
        "tables in the warehouse are partitioned by day",
        "backfills are run on weekends only",
        "every metric has an owner listed in metrics.yaml",
    ],
    "the mobile app": [
        "releases go out every second Tuesday",
        "strings live in the shared translation files",
        "offline edits are queued and replayed in order",
        "minimum supported iOS version is two majors back",
        "crash reports are triaged the day after a release",
    ],
    "the infrastructure repository": [
        "every module has a README with its inputs and outputs",
        "changes are applied by the pipeline, never locally",
        "resources carry the team and cost-centre tags",
        "secrets come from the vault, never tfvars files",
        "state files are locked in DynamoDB",
    ],
    "incident handling": [
        "the on-call engineer is the incident commander until handed over",
        "status page updates go out every 30 minutes",
        "postmortems are blameless and published within a week",
        "customer-facing incidents get a support macro",
        "the incident channel is named after the date and a short slug",
    ],
    "the design system": [
        "spacing uses the 4-pixel scale",
        "only two font weights are used",
        "icons are 16 or 24 pixels, nothing in between",
        "modals are avoided for anything longer than one question",
        "colours are referenced by token name, never by value",
    ],
    "the data team's notebooks": [
        "notebooks are not run in production",
        "queries over a million rows use the warehouse, not the replica",
        "shared notebooks are saved with outputs cleared",
        "results quoted to management link to the notebook",
    ],
    "the support tooling": [
        "impersonation is logged and needs a ticket number",
        "refunds over 500 euros need a second approver",
        "macros are reviewed every quarter",
        "customer notes must not contain passwords or card numbers",
    ],
    "the documentation site": [
        "screenshots are retaken for every major UI change",
        "code samples are tested in CI",
        "each page has one owner in the front matter",
        "links to the app use the /go/ redirect service",
    ],
    "the hiring process": [
        "take-home tasks are capped at three hours",
        "every interviewer writes feedback before the debrief",
        "pairing interviews use the candidate's own editor",
    ],
}

LESSON_TEMPLATES = [
    "Lesson from PR #{pr} ({c}): {lesson}.",
    "From the review of {c}: {lesson}.",
    "{person} pointed out in review of {c} that {lesson}.",
]
LESSONS = [
    "feature flags must be removed within two sprints of full rollout",
    "a new queue needs an alert on its length",
    "the Slack message builder must escape user names",
    "loading every row to count them is not acceptable",
    "a changed cron expression needs a note in the runbook",
    "retry loops must be bounded",
    "magic numbers belong in named constants",
    "the mobile API must stay backwards compatible for two releases",
    "screenshots of UI changes belong in the PR",
    "colour alone must not carry meaning",
    "unit tests must not hit the network",
    "log messages should include the account id",
    "deprecated endpoints need a Sunset header",
    "JSON columns need a schema check on write",
    "the admin actions need confirmation pages",
    "timestamps in CSV exports need the offset",
    "a background job must tolerate the row being deleted meanwhile",
    "large fixtures slow the suite; build data in the test",
    "the public status page must not show internal host names",
    "every feature flag needs an owner and an expiry date",
    "analytics events must not carry free-text fields",
    "string concatenation in translations breaks word order",
    "HTML email needs a plain-text part",
    "the API client must send a User-Agent with its version",
]

FEEDBACK_TEMPLATES = [
    "{person} prefers {pref}.",
    "Feedback from {person}: {pref}.",
    "{person} asked that {pref2} from now on.",
]
PREFS = [
    ("small commits that each build", "commits each build on their own"),
    ("diagrams in Mermaid rather than images", "architecture diagrams are written in Mermaid"),
    ("async updates in the channel over meetings", "status goes into the channel instead of a meeting"),
    ("one approver who knows the area over two who don't", "reviews are assigned to someone who knows the area"),
    ("tables in the docs over long paragraphs", "reference pages use tables"),
    ("British spelling in customer-facing text", "customer texts use British spelling"),
    ("examples before explanations in the docs", "docs pages start with an example"),
    ("short design notes before big changes", "big changes start with a one-page design note"),
    ("numbers with units in dashboards", "every dashboard axis has a unit"),
    ("explicit names over abbreviations", "abbreviations are spelled out in code"),
    ("demos recorded as short videos", "sprint demos are recorded"),
    ("Friday afternoons without meetings", "no meetings are booked on Friday afternoons"),
]

INCIDENT_TEMPLATES = [
    "Incident {month} {year}: {c} went down because {cause}; fixed by {fix}.",
    "Postmortem ({month} {year}): {cause} in {c}; the follow-up was {fix}.",
    "Outage in {c} on a {day}: {cause}. Since then {fix}.",
]
CAUSES = [
    "a certificate expired",
    "the disk filled up with temp files",
    "a config change disabled the cache",
    "a dependency released a breaking minor version",
    "a deploy ran before its migration",
    "the provider changed their response format",
    "a runaway query held locks",
    "DNS for the internal registry failed",
    "a retry storm overloaded the queue",
    "clock skew between hosts",
]
FIXES = [
    "an alert thirty days before expiry",
    "a cleanup task and a disk alert",
    "a config check in CI",
    "pinning exact versions",
    "running migrations in a release job",
    "a contract test against the sandbox",
    "a statement timeout of 30 seconds",
    "a fallback resolver",
    "a circuit breaker",
    "chrony on every host",
]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]

DECISION_TEMPLATES = [
    "Decision ({year}): {tech} for {purpose} instead of {alt}, because {reason}.",
    "We chose {tech} over {alt} for {purpose}; {reason}.",
    "ADR: use {tech} for {purpose}. {alt} was rejected because {reason}.",
]
DECISIONS = [
    ("Loki", "log storage", "Elasticsearch", "it costs a tenth as much to run"),
    ("Postmark", "transactional mail", "SES", "its bounce handling is better"),
    ("Sentry", "error tracking", "Rollbar", "the team already knew it"),
    ("Terraform", "infrastructure", "Pulumi", "more people could read it"),
    ("uv", "dependency locking", "Poetry", "it resolves in seconds"),
    ("Playwright", "browser tests", "Cypress", "it runs several browsers"),
    ("Grafana", "dashboards", "Datadog", "of the price per host"),
    ("Redis streams", "the activity feed", "Kafka", "the volume is small"),
    ("WeasyPrint", "PDF rendering", "wkhtmltopdf", "the latter is unmaintained"),
    ("htmx", "interactivity", "React", "pages stay server-rendered"),
    ("Argon2", "password hashing", "PBKDF2", "it resists GPU attacks better"),
    ("S3", "attachment storage", "a shared volume", "volumes do not scale across hosts"),
    ("OpenTelemetry", "tracing", "vendor agents", "it keeps us portable"),
    ("Celery", "background jobs", "RQ", "of its scheduling and retries"),
]

OPS_TEMPLATES = [
    "The {env} environment runs {detail}.",
    "In {env}, {detail2}.",
]
ENVS = ["staging", "production", "the preview environments", "the demo environment", "the load-test environment"]
OPS_DETAILS = [
    ("on two nodes", "there are two nodes"),
    ("with debug toolbar enabled", "the debug toolbar is on"),
    ("a copy of production data anonymised weekly", "data is an anonymised weekly copy"),
    ("with email sent to a catch-all mailbox", "all email goes to a catch-all mailbox"),
    ("on the previous Postgres major", "Postgres is one major behind"),
    ("with the LLM calls pointed at a fake server", "LLM calls go to a fake server"),
    ("without the analytics exporter", "the analytics exporter is off"),
    ("with feature flags all on", "every feature flag is on"),
]

TICKET_TEMPLATES = [
    "Ticket {key}-{n} about {c} was closed as {resolution}: {note}.",
    "{key}-{n}: {person} {action} {c} for {customer}; {note}.",
]
RESOLUTIONS = ["won't fix", "duplicate", "fixed", "cannot reproduce", "works as designed"]
ACTIONS = ["patched", "reverted a change to", "added logging to", "migrated", "documented", "profiled"]
CUSTOMERS = ["Acme", "Globex", "Initech", "Umbrella", "Hooli", "Vandelay", "Stark Industries", "Wayne Enterprises"]
NOTES = [
    "the customer was on an old app version",
    "the root cause was a proxy stripping headers",
    "a follow-up is planned for next quarter",
    "the workaround is in the help centre",
    "support has a macro for it",
    "it only happened with SSO accounts",
    "the fix is behind a flag",
    "the data was corrected by hand",
]

METRIC_TEMPLATES = [
    "{C} handles about {n} {unit}s a day.",
    "{C} error rate is under {pct} per mille.",
    "{C} costs about {cost} euros a month to run.",
]

# The "applies when" line of each template family, as the distiller would write it
# (bench/data/applies_when.py says how the labelled ones were written).
FACT_WHEN = [
    "looking for or changing the code of {c} ({p})",
    "needing an owner or reviewer for changes to {c} ({p})",
    "changing {c} ({p}) or fixing its failures",
    "running or adding tests of {c} ({p})",
    "changing {c} ({p}) or writing its tests",
    "refactoring or upgrading {c} ({p})",
    "configuring {c} ({p}) or changing its settings",
    "changing plans or what free accounts can use in {c} ({p})",
    "making large changes to {c} ({p})",
    "changing how {c} ({p}) behaves when a service it needs is down",
    "debugging errors of {c} ({p})",
    "adding logging to {c} ({p})",
    "rolling out changes to {c} ({p}) behind its feature flag",
    "working in the code of {c} ({p})",
    "changing the performance of {c} ({p})",
    "changing the queues or workers of {c} ({p})",
    "changing the cached state of {c} ({p}) in Redis",
    "monitoring {c} ({p}) or its dashboards",
]
LESSON_WHEN = [
    "adding feature flags or finishing a rollout",
    "adding a new queue or background worker",
    "sending Slack messages that contain user names",
    "counting rows or records",
    "changing a cron schedule",
    "writing retry loops",
    "writing code with numeric limits or thresholds",
    "changing the mobile API",
    "changing the UI",
    "showing states or statuses in the UI",
    "writing unit tests that call other services",
    "adding log messages",
    "deprecating or removing API endpoints",
    "storing data in JSON columns",
    "adding actions to the admin",
    "writing timestamps into CSV exports",
    "writing background jobs that read rows",
    "writing test data or fixtures",
    "changing the public status page",
    "adding a feature flag",
    "adding analytics events",
    "translating text built from several pieces",
    "sending HTML email",
    "writing an API client",
]
INCIDENT_WHEN = [
    "renewing certificates",
    "writing temporary files",
    "changing the cache configuration",
    "upgrading dependencies",
    "deploying a change with a migration",
    "parsing a provider's responses",
    "writing long-running queries",
    "configuring DNS or the package registry",
    "retrying failed jobs",
    "comparing times across hosts",
]
AREA_WHEN = {
    "the frontend code": "writing frontend components, forms and pages",
    "the analytics pipeline": "adding analytics events, metrics or warehouse tables",
    "the mobile app": "changing or releasing the mobile app",
    "the infrastructure repository": "changing infrastructure or Terraform modules",
    "incident handling": "handling an incident or an outage",
    "the design system": "designing or styling UI components",
    "the data team's notebooks": "writing data notebooks or analyses",
    "the support tooling": "changing the support tools or acting on a customer's account",
    "the documentation site": "writing or changing the documentation",
    "the hiring process": "interviewing or hiring engineers",
}
PREF_WHEN = [
    "committing changes",
    "drawing architecture diagrams",
    "reporting status to the team",
    "asking for a review",
    "writing reference documentation",
    "writing text customers read",
    "writing documentation pages",
    "planning a big change",
    "building dashboards",
    "naming things in code",
    "presenting work at the sprint demo",
    "booking meetings",
]


class Row(NamedTuple):
    memory: str
    idea: tuple[object, ...]  # rows with the same idea restate one another
    applies_when: str
    path: str  # the file or folder it is about, or ""


# How many rows of one idea the distractors keep. A fact or metric is one per component
# and template (each component's is a different fact); a lesson, rule, preference or
# decision restated for another component or person, or in another template's words,
# is the same memory again.
IDEA_CAP = {
    "fact": 1,
    "metric": 1,
    "lesson": 2,
    "incident": 4,
    "convention": 1,
    "feedback": 2,
    "decision": 1,
    "ops": 2,
    "ticket": 0,
}

PATH_RE = re.compile(r"(?<![\w/.:])(?:[\w-]+/)+(?:[\w.-]+)?|\b[\w-]+\.(?:py|html|txt|md|toml|yml|css|js|svg)\b")


def paths_in(text: str) -> list[str]:
    """The file and folder paths a text names ("billing/gateways/stripe.py", "infra/envs")."""
    return list(dict.fromkeys(m.rstrip(".") for m in PATH_RE.findall(text)))


def words(text: str) -> set[str]:
    stop = {
        "a",
        "an",
        "the",
        "of",
        "to",
        "in",
        "on",
        "for",
        "and",
        "or",
        "is",
        "are",
        "be",
        "with",
        "by",
        "it",
        "its",
        "that",
        "this",
        "as",
        "at",
        "from",
        "not",
        "no",
        "never",
        "we",
        "our",
        "us",
        "they",
        "their",
        "when",
        "so",
        "do",
        "does",
        "has",
        "have",
        "was",
        "were",
        "than",
        "then",
        "only",
        "all",
        "each",
        "every",
        "one",
        "into",
    }
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in stop and len(w) > 1}


def overlap(query: str, memory: str) -> float:
    m = words(memory)
    return round(len(words(query) & m) / len(m), 3) if m else 0.0


def template_memories(rng: random.Random) -> tuple[list[Row], list[Row]]:
    """Every memory the templates can make, shuffled: the varied families, and the
    ticket history (alike in shape, so kept to the scale memories). Each with its idea
    (what makes two of them restatements of one another), its "applies when" line and
    the path it is about."""
    out: list[Row] = []
    tickets: list[Row] = []
    for name, path, team in COMPONENTS:
        short = name.removeprefix("the ").strip()
        for k, (tmpl, when) in enumerate(zip(FACT_TEMPLATES, FACT_WHEN, strict=True)):
            for _ in range(10):
                out.append(
                    Row(
                        tmpl.format(
                            c=name,
                            C=name[0].upper() + name[1:],
                            p=path,
                            t=team,
                            short=short,
                            person=rng.choice(TEAMS_PEOPLE[team]),
                            month=rng.choice(MONTHS),
                            year=rng.choice(YEARS),
                            failure=rng.choice(FAILURES),
                            n=rng.choice([20, 45, 90, 150, 300]),
                            edge=rng.choice(EDGES),
                            legacy=rng.choice(LEGACY),
                            setting=short.upper().replace(" ", "_").replace("-", "_"),
                            service=rng.choice(SERVICES),
                            unit=rng.choice(UNITS),
                            pct=rng.choice([5, 10, 25, 50, 75]),
                            ms=rng.choice([40, 80, 120, 250, 600, 1200]),
                            prefix=short.split()[0].lower(),
                        ),
                        ("fact", k, name),
                        when.format(c=name, p=path),
                        path,
                    )
                )
        for tmpl in LESSON_TEMPLATES:
            for lesson, when in zip(LESSONS, LESSON_WHEN, strict=True):
                out.append(
                    Row(
                        tmpl.format(
                            pr=rng.randint(1200, 9800), c=name, lesson=lesson, person=rng.choice(TEAMS_PEOPLE[team])
                        ),
                        ("lesson", lesson),
                        f"{when}; first seen in {name} ({path})",
                        path,
                    )
                )
        for tmpl in INCIDENT_TEMPLATES:
            for i in range(len(CAUSES)):
                out.append(
                    Row(
                        tmpl.format(
                            month=rng.choice(MONTHS),
                            year=rng.choice(YEARS),
                            c=name,
                            cause=CAUSES[i],
                            fix=FIXES[i if rng.random() < 0.7 else rng.randrange(len(FIXES))],
                            day=rng.choice(DAYS),
                        ),
                        ("incident", CAUSES[i]),
                        f"deploying or operating {name} ({path}); {INCIDENT_WHEN[i]}",
                        path,
                    )
                )
        for k, tmpl in enumerate(METRIC_TEMPLATES):
            for _ in range(3):
                out.append(
                    Row(
                        tmpl.format(
                            C=name[0].upper() + name[1:],
                            n=rng.choice([300, 2_000, 15_000, 120_000]),
                            unit=rng.choice(UNITS),
                            pct=rng.choice([1, 2, 5]),
                            cost=rng.choice([40, 150, 900, 2_400]),
                        ),
                        ("metric", k, name),
                        f"estimating the load, error rate or cost of {name} ({path})",
                        path,
                    )
                )
    for _ in range(4_000):
        name, path, team = rng.choice(COMPONENTS)
        tickets.append(
            Row(
                rng.choice(TICKET_TEMPLATES).format(
                    key=team[:3].upper(),
                    n=rng.randint(100, 9999),
                    c=name,
                    resolution=rng.choice(RESOLUTIONS),
                    note=rng.choice(NOTES),
                    person=rng.choice(TEAMS_PEOPLE[team]),
                    action=rng.choice(ACTIONS),
                    customer=rng.choice(CUSTOMERS),
                ),
                ("ticket", name),
                f"handling a customer's problem with {name} ({path})",
                path,
            )
        )
    for area, rules in AREAS_RULES.items():
        for rule in rules:
            for tmpl in CONVENTION_TEMPLATES:
                out.append(Row(tmpl.format(area=area, rule=rule), ("convention", rule), AREA_WHEN[area], ""))
    people = [p for ps in TEAMS_PEOPLE.values() for p in ps]
    for person in people:
        for (pref, pref2), when in zip(PREFS, PREF_WHEN, strict=True):
            tmpl = rng.choice(FEEDBACK_TEMPLATES)
            out.append(Row(tmpl.format(person=person, pref=pref, pref2=pref2), ("feedback", pref), when, ""))
    for tech, purpose, alt, reason in DECISIONS:
        for tmpl in DECISION_TEMPLATES:
            out.append(
                Row(
                    tmpl.format(tech=tech, purpose=purpose, alt=alt, reason=reason, year=rng.choice(YEARS)),
                    ("decision", tech),
                    f"choosing or changing the tools for {purpose}",
                    "",
                )
            )
    for env in ENVS:
        for detail, detail2 in OPS_DETAILS:
            out.append(
                Row(
                    rng.choice(OPS_TEMPLATES).format(env=env, detail=detail, detail2=detail2),
                    ("ops", detail),
                    f"deploying to or testing in {env}",
                    "",
                )
            )
    seen: set[str] = set()
    varied = [m for m in out if not (m.memory in seen or seen.add(m.memory))]
    tickets = [m for m in tickets if not (m.memory in seen or seen.add(m.memory))]
    rng.shuffle(varied)
    return varied, tickets


def distinct(rows: list[Row]) -> tuple[list[Row], list[Row]]:
    """The rows that say something new, and the rest: at most IDEA_CAP[family] rows per
    idea (the first ones in ``rows``' order)."""
    count: dict[tuple[object, ...], int] = {}
    kept, rest = [], []
    for row in rows:
        n = count.get(row.idea, 0)
        if n < IDEA_CAP[str(row.idea[0])]:
            count[row.idea] = n + 1
            kept.append(row)
        else:
            rest.append(row)
    return kept, rest


def main() -> None:
    rng = random.Random(20251124)
    lines: list[dict[str, object]] = []
    for i, ((query, memory), when, (subtasks, files)) in enumerate(zip(PAIRS, APPLIES_WHEN, TASK_CONTEXT, strict=True)):
        split = "tune" if i % 3 == 0 else "test"
        lines.append(
            {
                "kind": "pair",
                "id": i,
                "query": query,
                "memory": memory,
                "split": split,
                "overlap": overlap(query, memory),
                "applies_when": when,
                "subtasks": subtasks,
                "files": files,
                "memory_paths": paths_in(memory),
            }
        )
    relevant = {m for _, m in PAIRS}
    varied, tickets = template_memories(rng)
    pool = [row for row in varied if row.memory not in relevant]
    kept, repeated = distinct(pool)
    decoys = [Row(m, ("decoy", m), when, "") for m, when in zip(DECOYS, DECOY_APPLIES_WHEN, strict=True)]
    distractors = decoys + kept[: DISTRACTORS - len(decoys)]
    lines += [
        {
            "kind": "distractor",
            "memory": r.memory,
            "applies_when": r.applies_when,
            "paths": paths_in(r.memory) or ([r.path] if r.path else []),
        }
        for r in distractors
    ]
    rest = kept[DISTRACTORS - len(decoys) :] + repeated + tickets
    scale = rest[: TOTAL - len(PAIRS) - len(distractors)]
    if len(PAIRS) + len(distractors) + len(scale) < TOTAL:
        raise SystemExit(f"The templates make only {len(varied) + len(tickets)} memories: not enough for {TOTAL}.")
    lines += [
        {
            "kind": "scale",
            "memory": r.memory,
            "applies_when": r.applies_when,
            "paths": paths_in(r.memory) or ([r.path] if r.path else []),
        }
        for r in scale
    ]
    OUT.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))
    print(
        f"Wrote {OUT}: {len(PAIRS)} pairs, {len(distractors)} distractors ({len(decoys)} hand-written, "
        f"{len(distractors) - len(decoys)} from templates, {len(repeated)} restatements left out), "
        f"{len(scale)} scale memories"
    )


if __name__ == "__main__":
    main()
