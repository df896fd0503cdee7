"""The mailer: an example Tether agent on the public SDK that emails customer segments through
SMTP, at most once per recipient whatever crashes."""

from tether_mailer.agent import agent

__all__ = ["agent"]
