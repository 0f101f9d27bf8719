"""The tests' fake forge: the demo's (llm/demo/forge/), which ``make demo`` serves too."""

from __future__ import annotations

from llm.demo.forge import PREFIXES, FakeForge, FakePull, FakeRepository, Recorded, main

__all__ = ["PREFIXES", "FakeForge", "FakePull", "FakeRepository", "Recorded", "main"]

if __name__ == "__main__":
    main()
