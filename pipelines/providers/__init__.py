"""LLM providers behind one interface (base.Provider): the Anthropic SDK (also any
Anthropic-compatible endpoint through its base URL) and the Claude CLI."""
