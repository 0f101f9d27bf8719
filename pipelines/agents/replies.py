"""The Coder's replies to a person's comments on lines: why it left a comment's lines
as they were (a question answered, a change it disagrees with, one made elsewhere).

The person's review history says, per comment, whether the round changed its lines
(judged from git, pipelines/review/selectors.py ``line_comments_verdicts``); a reply is
the Coder's word beside that, shown as "Not changed — the Coder says: …". The API Coder
replies with its ``reply_to_comment`` tool (pipelines/agents/coder.py); the Claude CLI's,
which has only its own tools, with a ``[REPLY <comment>: …]`` marker in its summary.
Either way a reply names one of the comments it was sent; the latest reply to a
comment wins.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field

from llm.providers.base import Tool

REPLY_MAX_LENGTH = 2_000

REPLY_TO_COMMENT = Tool(
    name="reply_to_comment",
    description=(
        "Answer one of the person's comments on lines (by its number, as the comments' headings give it) "
        "when you leave its lines as they are: say why — the question answered, the change made elsewhere, "
        "or why the code should stay. The person sees your reply beside the comment. One call per comment; "
        "not needed for a comment whose lines you changed."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "comment": {"type": "integer", "description": "The comment's number."},
            "reply": {"type": "string", "description": "Your answer, in a few sentences."},
        },
        "required": ["comment", "reply"],
    },
)
REPLY_KEPT = "The person will see your reply beside comment {comment}. Go on."
REPLY_MISSING = "Write the reply itself in `reply`: why the comment's lines stay as they are."
UNKNOWN_COMMENT = "There is no comment {comment!r} to reply to; the comments sent to you are {comments}."

# ``[REPLY 12: why]``, also ``[REPLY to comment #12: why]``; the text holds no brackets.
REPLY_MARKER = re.compile(r"\[\s*REPLY\s+(?:to\s+)?(?:comment\s+)?#?(\d+)\s*:([^\[\]]*)\]", re.IGNORECASE)
REPLY_MARKER_HINT = (
    "When you leave the lines of a person's comment as they are, say why in your summary as "
    "[REPLY <the comment's number>: your answer]; the person sees it beside the comment."
)
REPLY_TOOL_HINT = (
    "When you leave the lines of a person's comment as they are, say why with reply_to_comment; "
    "the person sees it beside the comment."
)


@dataclass
class CommentReplies:
    """The replies a Coder's round gave, by comment id, to the comments it was sent."""

    comment_ids: Collection[int]
    by_comment: dict[int, str] = field(default_factory=dict)

    def take(self, comment: object, reply: object) -> str | None:
        """Keep a reply; what is wrong with it (for the Coder to fix), or None."""
        if not isinstance(comment, int) or isinstance(comment, bool) or comment not in self.comment_ids:
            shown = ", ".join(str(number) for number in sorted(self.comment_ids)) or "none"
            return UNKNOWN_COMMENT.format(comment=comment, comments=shown)
        text = " ".join(reply.split()) if isinstance(reply, str) else ""
        if not text:
            return REPLY_MISSING
        self.by_comment[comment] = text[:REPLY_MAX_LENGTH]
        return None

    def take_markers(self, text: str) -> str:
        """Keep the reply markers of ``text`` that name a comment sent; ``text`` without
        any marker (a marker naming no such comment is dropped too: it is no summary)."""
        for match in REPLY_MARKER.finditer(text):
            self.take(int(match.group(1)), match.group(2))
        return REPLY_MARKER.sub("", text).strip()
