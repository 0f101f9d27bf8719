"""The notes page's forms: where an update goes (the notes for every project or one
project's)."""

from __future__ import annotations

from django import forms

from core.converters import MAX_ID


class NotesPlaceForm(forms.Form):
    # An id, looked up among the user's projects by the view: someone else's is a 404,
    # like one that does not exist.
    project = forms.IntegerField(required=False, min_value=1, max_value=MAX_ID)
