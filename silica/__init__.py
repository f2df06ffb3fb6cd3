"""silica: user-written script tools for LLM agents, with images as first-class results."""

__version__ = "0.1.0"
