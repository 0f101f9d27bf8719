from __future__ import annotations

from django import forms

from pipelines.messages.services import BODY_REQUIRED as MESSAGE_REQUIRED
from pipelines.messages.services import RUN_MESSAGE_MAX_LENGTH
from pipelines.models import LineSide
from pipelines.review.services import BODY_REQUIRED, LINE_COMMENT_BODY_MAX_LENGTH

FEEDBACK_MAX_LENGTH = 10_000
API_KEY_MAX_LENGTH = 500


class StartRunForm(forms.Form):
    """Start a run; a person without a server-side key may give their own for this run."""

    api_key = forms.CharField(
        required=False,
        max_length=API_KEY_MAX_LENGTH,
        strip=True,
        widget=forms.PasswordInput(attrs={"autocomplete": "off", "placeholder": "sk-ant-…"}),
        label="Your Anthropic API key",
        help_text="Used for this run only. Stored encrypted, never shown or logged.",
    )


class RequestChangesForm(forms.Form):
    # Empty is the service's to refuse: a request may be the pending line comments alone.
    feedback = forms.CharField(
        max_length=FEEDBACK_MAX_LENGTH,
        strip=True,
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
    )


class LineCommentBodyForm(forms.Form):
    """A line comment's text: a new one's or a pending one's edit."""

    body = forms.CharField(
        max_length=LINE_COMMENT_BODY_MAX_LENGTH,
        strip=True,
        error_messages={"required": BODY_REQUIRED},
        widget=forms.Textarea(attrs={"rows": 2}),
    )


class LineCommentForm(LineCommentBodyForm):
    """A comment on lines of a file in the diff (the page's "+" on a line number)."""

    path = forms.CharField(max_length=1000)
    line_start = forms.IntegerField(min_value=1, max_value=2_147_483_647)
    line_end = forms.IntegerField(min_value=1, max_value=2_147_483_647, required=False)
    # "old": removed lines, numbered as the old file had them (the page's "+" on a removed line).
    side = forms.ChoiceField(choices=LineSide.choices, required=False)

    def clean_side(self) -> str:
        return str(self.cleaned_data.get("side") or LineSide.NEW)


class RunMessageForm(forms.Form):
    body = forms.CharField(max_length=RUN_MESSAGE_MAX_LENGTH, strip=True, error_messages={"required": MESSAGE_REQUIRED})
