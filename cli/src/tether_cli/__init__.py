"""The tether command."""
