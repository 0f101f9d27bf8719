"""A repository's environment: what its setup script produced (a virtualenv,
``node_modules``, …), prepared once per key and restored into every run's worktree.

- ``scripts``: which setup script is in force (the Repository page's, else the one the
  repository carries: ``.autocoder/setup.sh``, a devcontainer's commands), read from a
  commit's objects, never from files a link could point out of the repository;
- ``keys``: the key — the script, the base image and the manifests and lockfiles at the
  commit (``ENVIRONMENT_KEY_FILES``);
- ``store``: the files on disk under ``ENVIRONMENTS_ROOT``: what setup produced, moved
  out of the worktree it ran in, and restored into a run's worktree as hard links (a
  command may replace a restored file, never write into the kept one);
- ``setup``: running the script in the sandbox, with network and the repository's
  package cache, its output streamed;
- ``services``: the public actions, a module each (``ready``: make a run's environment
  ready; ``preparing``: claim and prepare a kept one; ``rebuild``; ``eviction``; the
  page's ``settings``); ``baseline``: the test command on the base commit, and telling
  a broken environment from failing tests.

See docs/ARCHITECTURE.md, "Environments".
"""
