"""A fake forge for the tests and ``make demo``: a real local HTTP server speaking the documented pull and
merge request endpoints of GitHub (``/github``), Gitea/Forgejo (``/gitea/api/v1``) and
GitLab (``/gitlab/api/v4``), reached by API base URL as the real ones are.

It keeps repositories (optionally backed by a bare git repository, whose branches a new
pull request's head must exist in, as on a real forge), checks the token and its scope
like the forges do (401 unknown token, 403 no write access), refuses a second open pull
request for the same head (422 GitHub, 409 GitLab and Gitea), records every request, and
can fail on demand. Tests merge or close a pull request as a person on the forge would,
and build the webhook delivery the forge would send (``webhook``).

Standard library only, like the demo model. Run on its own (``make demo`` does, for the
README's pull-request walk-through), it serves until Ctrl-C:

    python -m llm.demo.forge --port 8091 --token T --repository team/app=/path/to/bare.git

and ``POST /_control/state`` with {"kind", "repository", "number", "state"} and, to be told
like a real forge tells, {"webhook": URL, "secret": S} plays the person on the forge: the
pull request is merged or closed and the signed delivery is POSTed to the webhook URL.
``POST /_control/review`` plays a reviewer the same way (``reviews``), and
``/_control/collaborator`` {repository, login, permission} gives someone write access.
``POST /_control/issue`` with {"kind", "repository", "title", "body", "labels", "assignee"?,
"state"?, "number"? (to edit or close one)} does the same for an issue (``issues.py``).
``POST /_control/checks`` with {"kind", "repository", "sha" or "number", "checks": [{"name",
"state", "log"}]} plays CI the same way (``checks.py``).
"""

from .server import PREFIXES, FakeForge, main
from .state import FakePull, FakeRepository, Recorded

__all__ = ["PREFIXES", "FakeForge", "FakePull", "FakeRepository", "Recorded", "main"]
