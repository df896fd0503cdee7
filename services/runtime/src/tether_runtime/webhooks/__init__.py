"""Webhooks: signed deliveries of Tether's outbox to the endpoints an operator configured."""
