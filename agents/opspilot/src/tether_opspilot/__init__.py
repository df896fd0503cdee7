"""OpsPilot: Tether's reference agent, written on the public SDK only."""

from tether_opspilot.agent import agent

__all__ = ["agent"]
