"""The agent: conversation state, image aging, and the loop that calls models and tools."""
