"""LangGraph graphs as Tether agents."""
